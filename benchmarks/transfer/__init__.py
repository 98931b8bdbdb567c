"""Linear transfer of frozen features to small data sets (SynCLR Table 6: L-BFGS logistic regression,
its L2 strength chosen on a validation split, refit on train + val, scored on test)."""
