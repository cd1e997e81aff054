"""PyTorch's own CPU backwards (softmax, log_softmax, layer_norm, rms_norm, gelu both ways, linear,
scaled_dot_product_attention with and without causal mask) against the certified specs, float64.
Writes reports/torch_agreement.{json,md}. Run: python benchmarks/torch_agreement.py"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vjpcert.specs import builtin_ops  # noqa: E402
from vjpcert.impl import torch_agreement  # noqa: E402

if __name__ == "__main__":
    for r in torch_agreement(builtin_ops(), ROOT / "reports"):
        print(f"{r['op']:18} {r['pytorch']:48} {r['verdict']:8} {r['min_digits']} digits")
