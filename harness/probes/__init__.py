"""What several protocols train or search on frozen features, below the protocols: the labelled
splits and probe input vectors (labelled_features.py), the linear-probe grid and its training loop
(linear_grid.py, linear_data.py, grid_selection.py, linear_probe.py), the blocked similarity
search's buffer (similarity_buffer.py) and depth from bin scores (depth_bins.py)."""
