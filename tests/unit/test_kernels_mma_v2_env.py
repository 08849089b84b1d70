"""fp8_gemm's MMA_V2 switch: Triton's DISABLE_MMA_V3 is set only inside the launch that asks for it, and restored."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("triton")

from recipekit.backends.cuda_sm80.kernels import fp8_gemm  # noqa: E402


def test_set_inside_and_removed_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISABLE_MMA_V3", raising=False)
    with fp8_gemm._mma_v3_disabled(True):
        assert os.environ["DISABLE_MMA_V3"] == "1"
    assert "DISABLE_MMA_V3" not in os.environ


def test_removed_after_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISABLE_MMA_V3", raising=False)
    with pytest.raises(RuntimeError, match="compile failed"):
        with fp8_gemm._mma_v3_disabled(True):
            raise RuntimeError("compile failed")
    assert "DISABLE_MMA_V3" not in os.environ


def test_off_or_user_set_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISABLE_MMA_V3", raising=False)
    with fp8_gemm._mma_v3_disabled(False):
        assert "DISABLE_MMA_V3" not in os.environ
    monkeypatch.setenv("DISABLE_MMA_V3", "true")
    with fp8_gemm._mma_v3_disabled(True):
        assert os.environ["DISABLE_MMA_V3"] == "true"
    assert os.environ["DISABLE_MMA_V3"] == "true"
