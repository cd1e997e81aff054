"""Negative controls for the kernel tier: deliberately broken kernels, each of which one check must
turn red. They are real kernels (same conventions as cuda_kernels/), launched through the same
checker as the registry's, via ``check_kernel_claim(..., kernel=<KernelSpec>)``. This file is their
index (``CONTROLS``, ``ptx_controls``); the kernels are in one file per op family beside it:
controls_rows.py (softmax, LayerNorm, RMSNorm), controls_elementwise.py (GELU, RoPE) and
controls_tiled.py (linear's matmul, attention) and controls_chunked.py (chunked linear attention).

    missing_sync          a tree reduction without the barrier between levels   -> race detector
    uninitialised_read    threads beyond the row read shared slots nobody wrote -> race detector
    divergent_barrier     thread 0 leaves before the block's last barrier       -> race detector
    half_partials         the tree starts at BLOCK/4: half the partial sums lost -> tolerance at n = 1025
                          (and invisible at n = 7, where only the lower half holds data)
    skips_last            the elementwise loop stops one element short         -> NaN poison
    cleared_by_block_0    block 0 zeroes the whole output in the launch that writes it: right when
                          block 0 runs first (the simulator's order)             -> determinism (blocks reversed)
    float64_gelu          a float32 GELU written with float literals (0.5, 1.0) -> .f64 in the PTX
                          (and numerically fine: the simulator alone cannot see it)
    wrong_dK              attention's dK = c dS Q instead of c dS^T Q            -> tolerance
    nondeterministic      output bits depend on the run (as float atomics do)   -> determinism
    softmax_bwd_no_dot    dx = y * dy, the row term dropped                     -> law cotangent_sums_to_zero

Faults real kernels have shipped with, each invisible to simpler checks (standard-normal inputs
only, the simulator's launch configuration only, a tolerance of k x numpy's float32 error):
    softmax_no_max        exp(x) without the row maximum: NaN at a large offset  -> NaN poison
    softmax_global_total_racy  the row's sum by atomic adds into global memory, zeroed by thread 0
                          with nothing ordering the store before the adds        -> determinism (threads reversed)
    softmax_max_over_full_blocks  the row maximum skips the last, partial block: NaN
                          only when the row's largest entry lies there           -> NaN poison (huge_in_last_block)
    flash_fwd_no_running_max  flash forward without its running max: NaN for
                          logits of a few hundred (large magnitudes)             -> NaN poison
    layernorm_one_pass_variance  E[x^2] - E[x]^2: cancels at |mean| >> std      -> tolerance (large offset)
    flash_dq_accumulator_too_small  dQ's accumulator holds 4 columns per thread:
                          out of bounds at d = 128, tile 16 (fine at d <= 64)    -> kernel raised (GPU launch)
    flash_any_head_width  the flash backward without the launcher's refusal: at
                          d = 192 its tiles need 51 584 bytes of static shared memory -> kernel raised
    matmul_one_running_sum  one running sum over k instead of per-tile partials  -> tolerance (error model)
    flash_dkdv_one_running_sum  dK and dV in one running sum over every query instead of per-tile partials:
                          inside the bound on random inputs at every size (P's rounding hides it), red
                          on equal rows at m = 512                              -> tolerance (error model)
    rmsnorm_sequential_sum_of_squares  thread 0 sums the row's squares alone    -> tolerance (error model)
    rope_angle_shifted    the angle off by 1e-4 (still a rotation: the rotation
                          laws cannot see it)                                    -> tolerance (error model)
    rope_short_sincos     sin/cos polynomials one term short (~3e-5)             -> tolerance (error model)
    conv2d_dx_kernel_not_flipped  dx correlates dy with the kernel unflipped     -> tolerance
    batchnorm_bwd_no_mean_term  dx without - mean(g)                             -> tolerance
    relu_bwd_passes_zero  relu's mask x >= 0: relu'(0) = 1                       -> tolerance (on_kinks only)
    max_pool_bwd_tie_to_last  a tie's gradient to the last maximum              -> tolerance (on_kinks only)
    linear_attention_fwd_carry_dropped  each chunk starts from a zero state: right while the
                          sequence is one chunk (T <= C), wrong from T = C + 1  -> tolerance
    linear_attention_bwd_carry_dropped  dv without the later chunks' state cotangent: the same
                                                                                 -> tolerance
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from vjpcert.cuda_kernels.common import GPU_CONFIG, MODE, cuda, float32, kernel
from vjpcert.cuda_kernels.registry import KERNELS, KernelSpec


def _family(name: str):
    """A family file beside this one, loaded by its path as tests/test_kernels.py and the resource
    report load this one (tests/ is not a package, and the report runs in a subprocess)."""
    path = Path(__file__).with_name(f"controls_{name}.py")
    spec = importlib.util.spec_from_file_location(f"kernel_controls_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rows = _family("rows")
elementwise = _family("elementwise")
tiled = _family("tiled")
chunked = _family("chunked")


def _spec(base: str, launcher, name: str) -> KernelSpec:
    """A control impersonates a registry kernel: same op, outputs, laws and error model."""
    k = KERNELS[base]
    return KernelSpec(name, k.op, k.kind, k.outputs, launcher, k.laws, k.forward, doc="negative control",
                      model=k.model)


CONTROLS = {
    "missing_sync": _spec("softmax_fwd", rows._softmax_launcher("missing_sync"), "softmax_fwd~missing_sync"),
    "uninitialised_read": _spec("softmax_fwd", rows._softmax_launcher("uninit"), "softmax_fwd~uninitialised_read"),
    "divergent_barrier": _spec("softmax_fwd", rows._softmax_launcher("divergent"), "softmax_fwd~divergent_barrier"),
    "half_partials": _spec("softmax_fwd", rows._softmax_launcher("half_partials"), "softmax_fwd~half_partials"),
    "skips_last": _spec("gelu_erf_fwd", elementwise._gelu_launcher("skips_last"), "gelu_erf_fwd~skips_last"),
    "cleared_by_block_0": _spec("gelu_erf_fwd", elementwise._gelu_launcher("cleared_by_block_0"),
                                "gelu_erf_fwd~cleared_by_block_0"),
    "float64_gelu": _spec("gelu_erf_fwd", elementwise._gelu_launcher("float64"), "gelu_erf_fwd~float64"),
    "wrong_dK": _spec("attention_bwd", tiled.attention_bwd_wrong_dK, "attention_bwd~wrong_dK"),
    "nondeterministic": _spec("gelu_erf_fwd", elementwise.gelu_nondeterministic, "gelu_erf_fwd~nondeterministic"),
    "softmax_bwd_no_dot": _spec("softmax_bwd", rows.softmax_bwd_no_dot, "softmax_bwd~no_dot"),
    # faults real kernels have shipped with
    "softmax_no_max": _spec("softmax_fwd", rows.softmax_no_max, "softmax_fwd~no_max"),
    "softmax_global_total_racy": _spec("softmax_fwd", rows.softmax_global_total_racy,
                                       "softmax_fwd~global_total_racy"),
    "softmax_max_over_full_blocks": _spec("softmax_fwd", rows.softmax_max_over_full_blocks,
                                          "softmax_fwd~max_over_full_blocks"),
    "flash_fwd_no_running_max": _spec("flash_attention_fwd", tiled.flash_attention_fwd_no_max,
                                      "flash_attention_fwd~no_running_max"),
    "layernorm_one_pass_variance": _spec("layernorm_fwd", rows.layernorm_one_pass, "layernorm_fwd~one_pass_variance"),
    "flash_dq_accumulator_too_small": _spec("flash_attention_bwd", tiled.flash_attention_bwd_small_dq_acc,
                                            "flash_attention_bwd~dq_accumulator_too_small"),
    "matmul_one_running_sum": _spec("linear_fwd", tiled.linear_one_running_sum, "linear_fwd~one_running_sum"),
    "flash_dkdv_one_running_sum": _spec("flash_attention_bwd_saved", tiled.flash_attention_bwd_saved_one_running_sum,
                                        "flash_attention_bwd_saved~dkdv_one_running_sum"),
    "rmsnorm_sequential_sum_of_squares": _spec("rmsnorm_fwd", rows.rmsnorm_sequential,
                                               "rmsnorm_fwd~sequential_sum_of_squares"),
    "rope_angle_shifted": _spec("rope_half_fwd", elementwise._rope_launcher("angle", 1),
                                "rope_half_fwd~angle_shifted"),
    "rope_short_sincos": _spec("rope_interleaved_fwd", elementwise._rope_launcher("short", 0),
                               "rope_interleaved_fwd~short_sincos"),
    "flash_any_head_width": _spec("flash_attention_bwd", tiled.flash_attention_bwd_any_width,
                                  "flash_attention_bwd~any_head_width"),
    "conv2d_dx_kernel_not_flipped": _spec("conv2d_bwd", tiled.conv2d_bwd_unflipped, "conv2d_bwd~dx_kernel_not_flipped"),
    "batchnorm_bwd_no_mean_term": _spec("batchnorm_bwd", rows.batchnorm_bwd_no_mean, "batchnorm_bwd~no_mean_term"),
    # the kinks: right off the kink, wrong on it
    "relu_bwd_passes_zero": _spec("relu_bwd", elementwise.relu_bwd_ge, "relu_bwd~passes_zero"),
    "max_pool_bwd_tie_to_last": _spec("max_pool2d_bwd", elementwise.max_pool_bwd_tie_to_last,
                                      "max_pool2d_bwd~tie_to_last"),
    # the chunk boundary: right within one chunk, wrong across two
    "linear_attention_fwd_carry_dropped": _spec("linear_attention_fwd", chunked.linear_attention_fwd_carry_dropped,
                                                "linear_attention_fwd~carry_dropped"),
    "linear_attention_bwd_carry_dropped": _spec("linear_attention_bwd", chunked.linear_attention_bwd_carry_dropped,
                                                "linear_attention_bwd~carry_dropped"),
}


def ptx_controls():
    """Controls for the PTX check, at the GPU configuration (compile mode): the float64 GELU (.f64),
    the FlashAttention dK/dV kernel capped at 32 registers (spills), a kernel with 52 000 bytes of
    static shared memory (over 48 KiB), and one clean kernel (must report no problem)."""
    assert MODE == "compile", MODE
    from vjpcert.cuda_kernels.attention_flash import build_flash
    from vjpcert.cuda_kernels.common import PtxKernel
    e = elementwise._elementwise_kernels(GPU_CONFIG.block)
    dkdv = build_flash(GPU_CONFIG.attn_tile, 64).bwd_dkdv
    return [e.float64, e.skips_last, PtxKernel("flash_bwd_dkdv[maxreg=32]", dkdv.py_func, dkdv.sig, 32),
            _too_much_shared()]


def _too_much_shared():
    N = 13000                              # 52 000 bytes of float32 > 48 KiB

    @kernel("void(float32[::1])")
    def too_much_shared(a):
        sm = cuda.shared.array(N, float32)
        t = cuda.threadIdx.x
        for i in range(t, N, cuda.blockDim.x):
            sm[i] = a[i]
        cuda.syncthreads()
        for i in range(t, N, cuda.blockDim.x):
            a[i] = sm[N - 1 - i]
    return too_much_shared
