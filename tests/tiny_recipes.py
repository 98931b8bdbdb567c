"""Tiny pretraining recipes shared by the tests that train: seconds on 2 cores."""

TINY_DINO = {
    "method": {"name": "dino", "out_dim": 64, "hidden_dim": 64, "bottleneck_dim": 32,
               "use_bn_in_head": False, "warmup_teacher_temp": 0.04, "teacher_temp": 0.04,
               "crops": {"global_crops_size": 32, "local_crops_number": 2, "local_crops_size": 16,
                         "blur_p_global1": 0.0, "blur_p_global2": 0.0, "blur_p_local": 0.0}},
    # drop-path off: its random draws differ per process, which would make the
    # one-process and two-process runs legitimately different
    "backbone": {"arch": "vit_cpu_tiny", "depth": 1, "embed_dim": 32, "drop_path_rate": 0.0},
    "train": {"epochs": 3, "batch_size": 8, "lr": 5e-3, "warmup_epochs": 1, "checkpoint_every": 2,
              "log_every": 1, "freeze_last_layer": 1, "momentum_teacher": 0.9},
}
