"""scripts/install_mmcv.py builds mmcv's ops for CUDA exactly where a CUDA toolkit is present, keeps
that build apart in the cache, and installs mmdet with pycocotools beside mmseg."""
from __future__ import annotations

from scripts import install_mmcv


def test_without_nvcc_the_ops_are_cpu_only(monkeypatch, tmp_path):
    monkeypatch.delenv("SSL_BENCH_CUDA_OPS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "none"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert install_mmcv.nvcc_path() is None and not install_mmcv.cuda_toolkit_present()
    env = install_mmcv.build_env(cuda=False)
    assert env["FORCE_CUDA"] == "0" and env["CUDA_VISIBLE_DEVICES"] == "" and env["MMCV_WITH_OPS"] == "1"


def test_nvcc_under_cuda_home_is_found_and_cuda_builds_are_forced_and_cached_apart(monkeypatch, tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert install_mmcv.nvcc_path() == str(tmp_path / "bin" / "nvcc")
    env = install_mmcv.build_env(cuda=True)
    assert env["FORCE_CUDA"] == "1" and env.get("CUDA_VISIBLE_DEVICES") != ""  # the GPU stays visible
    assert install_mmcv.cache_dir(cuda=True).name.endswith("-cuda")
    assert not install_mmcv.cache_dir(cuda=False).name.endswith("-cuda")


def test_the_override_decides_and_the_stamp_records_it(monkeypatch):
    monkeypatch.setenv("SSL_BENCH_CUDA_OPS", "1")
    assert install_mmcv.cuda_toolkit_present() and install_mmcv.stamp_content()["cuda_ops_required"] is True
    monkeypatch.setenv("SSL_BENCH_CUDA_OPS", "0")
    assert not install_mmcv.cuda_toolkit_present()


def test_mmdet_and_pycocotools_are_installed_and_checked_with_the_stack():
    assert any(r.startswith("mmdet==3.3.0") for r in install_mmcv.DET_REQUIREMENTS)
    assert any(r.startswith("pycocotools") for r in install_mmcv.DET_REQUIREMENTS)
    assert "mmdet.models" in install_mmcv._CHECK_SNIPPET and "get_compiling_cuda_version" in install_mmcv._CHECK_SNIPPET
