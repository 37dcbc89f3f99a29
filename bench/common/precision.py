"""TF32 or IEEE FP32 for PyTorch's CUDA matmuls and cuDNN RNNs, through whichever API this PyTorch
has: PyTorch >= 2.9's fp32_precision settings (it complains when they are mixed with the old
allow_tf32 flags), else allow_tf32. Shared by bench/gpu/torch_gpu.py and tests/cli/check_cli_gpu.py
(import it where torch is installed)."""
import torch


def precision_state():
    """The TF32 settings as they are, as a dict (recorded in results, printed by the checks)."""
    if hasattr(torch.backends, "fp32_precision"):
        rnn = getattr(torch.backends.cudnn, "rnn", None)
        return {"api": "fp32_precision", "global": torch.backends.fp32_precision,
                "cuda.matmul": torch.backends.cuda.matmul.fp32_precision,
                "cudnn": getattr(torch.backends.cudnn, "fp32_precision", "(none)"),
                "cudnn.rnn": getattr(rnn, "fp32_precision", "(no cudnn.rnn)")}
    return {"api": "allow_tf32", "cuda.matmul": torch.backends.cuda.matmul.allow_tf32,
            "cudnn": torch.backends.cudnn.allow_tf32}


def set_tf32(allowed):
    """TF32 allowed, or off (IEEE FP32), for cuDNN's RNNs and for matmuls (a Linear head), through the
    API this PyTorch has (one of the two, never both)."""
    if hasattr(torch.backends, "fp32_precision"):
        mode = "tf32" if allowed else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        if hasattr(torch.backends.cudnn, "rnn"):
            torch.backends.cudnn.rnn.fp32_precision = mode
        else:  # only the cuDNN-wide setting
            torch.backends.cudnn.fp32_precision = mode
    else:
        torch.backends.cudnn.allow_tf32 = allowed
        torch.backends.cuda.matmul.allow_tf32 = allowed
