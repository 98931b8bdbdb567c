"""What the protocols that run through OpenMMLab's mmsegmentation share, below them: the pinned
stack and its install hint (stack.py), mmengine's launcher and process count (launcher.py), each
validation image's areas beside a run's metrics (per_image_io.py), the IoU metric and validation
log registered into mmseg (metric.py), and the allow-list that keeps torch's weights-only loading
on for mmengine's checkpoints (checkpoint_loading.py). Only torch is imported at module level;
mmcv / mmengine / mmseg are imported inside functions."""
