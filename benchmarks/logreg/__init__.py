"""Logistic regression on frozen features as iBOT runs it (bytedance/ibot
evaluation/eval_logistic_regression.py): cyanure's multiclass logistic regression, l2 penalty, no
intercept, solver catalyst-miso, one classifier per lambda of the sweep [0.01, 0.1, 1]."""
