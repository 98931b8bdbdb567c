"""Image-classification protocols on frozen features: weighted k-NN and the linear probe."""
