"""Wrong convolution backwards and forwards, from the bug families of hand-written conv kernels."""
import numpy as np

from vjpcert.specs.conv2d import (DILATION, GROUPS, TAPS, conv2d, conv2d_dilated_grouped, conv2d_s2, conv3x3,
                                  conv_transpose2d, depthwise_conv2d, depthwise_conv7x7, depthwise_input_grad,
                                  depthwise_kernel_grad, dilated_correlation, dilated_input_grad,
                                  dilated_kernel_grad, input_grad, kernel_grad, pad, pointwise_conv2d, spread_grad,
                                  taps, window)

TRANSPOSED = lambda i, j: (j, i)          # noqa: E731  (the tap (j, i) read for (i, j))


@conv2d.mutant("kernel_not_flipped_in_dx", kills=["vjp[x]"])
def _(B, x, w, b, dy):
    """dx correlates dy with the kernel as it is (the forward's orientation), not flipped."""
    return input_grad(dy, w, flip=False), kernel_grad(dy, pad(x)), dy.sum((0, 2, 3))


@conv2d.mutant("dw_taps_transposed", kills=["vjp[w]"])
def _(B, x, w, b, dy):
    """dw[o, c, i, j] filled from the tap (j, i)."""
    return input_grad(dy, w), kernel_grad(dy, pad(x), tap=TRANSPOSED), dy.sum((0, 2, 3))


@conv2d.mutant("bias_gradient_of_one_image", kills=["vjp[b]"])
def _(B, x, w, b, dy):
    """db summed over space but not over the batch."""
    return input_grad(dy, w), kernel_grad(dy, pad(x)), dy[0].sum((1, 2))


@conv2d.mutant("padding_off_by_one", replaces="forward", kills=["vjp[x]", "vjp[w]"])
def _(B, x, w, b):
    """The input padded by 2 and the window started at 1: the taps land one place off at the edge."""
    H, W = x.shape[2], x.shape[3]
    xp = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    y = sum(np.einsum("nchw,oc->nohw", window(xp, i, j, H, W), w[:, :, i, j]) for i, j in TAPS)
    return y + b[None, :, None, None]


@conv2d.mutant("relu_fused_into_the_forward", replaces="forward",
               kills=["vjp[x]", "vjp[w]", "vjp[b]", "linear_in_the_input"])
def _(B, x, w, b):
    """The activation of the next layer fused into the convolution's forward by mistake."""
    return B.relu(conv2d.forward(B, x, w, b))


@conv2d_s2.mutant("stride_in_the_forward_only", kills=["vjp[x]"])
def _(B, x, w, dy):
    """dx scattered at stride 1 (each tap's contribution at consecutive entries)."""
    Ho, Wo, H, W = dy.shape[2], dy.shape[3], x.shape[2], x.shape[3]
    dxp = sum(np.pad(np.einsum("nohw,oc->nchw", dy, w[:, :, i, j]),
                     ((0, 0), (0, 0), (i, H + 2 - Ho - i), (j, W + 2 - Wo - j))) for i, j in TAPS)
    return dxp[:, :, 1:-1, 1:-1], kernel_grad(dy, pad(x), 2)


@conv2d_s2.mutant("spread_one_place_off", kills=["vjp[x]"])
def _(B, x, w, dy):
    """Each tap's contribution spread to the odd entries instead of the even ones."""
    dxp = np.pad(spread_grad(dy, w), ((0, 0), (0, 0), (1, 0), (1, 0)))[:, :, :-1, :-1]
    return dxp[:, :, 1:-1, 1:-1], kernel_grad(dy, pad(x), 2)


@conv2d_s2.mutant("dw_windows_at_stride_one", kills=["vjp[w]"])
def _(B, x, w, dy):
    """dw correlates dy with the input's windows taken at stride 1."""
    return spread_grad(dy, w)[:, :, 1:-1, 1:-1], kernel_grad(dy, pad(x), 1)


@depthwise_conv2d.mutant("channels_mixed_in_dx", kills=["vjp[x]"])
def _(B, x, w, dy):
    """dx summed over the channels as a full convolution would (groups forgotten)."""
    H, W = x.shape[2], x.shape[3]
    dyp = pad(dy)
    dx = sum(window(dyp, 2 - i, 2 - j, H, W).sum(1, keepdims=True) * w[None, :, i, j, None, None] for i, j in TAPS)
    return dx, depthwise_kernel_grad(dy, pad(x))


@depthwise_conv2d.mutant("kernel_not_flipped_in_dx", kills=["vjp[x]"])
def _(B, x, w, dy):
    return depthwise_input_grad(dy, w, flip=False), depthwise_kernel_grad(dy, pad(x))


@depthwise_conv2d.mutant("dw_taps_transposed", kills=["vjp[w]"])
def _(B, x, w, dy):
    return depthwise_input_grad(dy, w), depthwise_kernel_grad(dy, pad(x), tap=TRANSPOSED)


@conv3x3.mutant("dx_of_the_forward_kernel", kills=["vjp[x]"])
def _(B, x, w, dy):
    """dx correlates dy with the kernel unflipped (the bias-free layer of a ResNet block)."""
    return input_grad(dy, w, flip=False), kernel_grad(dy, pad(x))


@pointwise_conv2d.mutant("weight_gradient_of_one_image", kills=["vjp[w]"])
def _(B, x, w, dy):
    """dw summed over the first image only (a batch loop that stopped early)."""
    return np.einsum("nohw,oc->nchw", dy, w), np.einsum("nohw,nchw->oc", dy[:1], x[:1])



@depthwise_conv7x7.mutant("padding_of_a_3x3_kernel", replaces="forward", kills=["vjp[x]", "vjp[w]"])
def _(B, x, w, b):
    """The 7x7 kernel over an input padded by 1 before (a 3x3 layer's padding kept) and zeros after:
    every output lands two places down and right of where it belongs."""
    H, W = x.shape[2], x.shape[3]
    xp = np.pad(pad(x, 1), ((0, 0), (0, 0), (0, 4), (0, 4)))
    return sum(window(xp, i, j, H, W) * w[None, :, i, j, None, None] for i, j in taps(7)) + b[None, :, None, None]


@depthwise_conv7x7.mutant("kernel_not_flipped_in_dx", kills=["vjp[x]"])
def _(B, x, w, b, dy):
    return depthwise_input_grad(dy, w, flip=False), depthwise_kernel_grad(dy, pad(x, 3), 7), dy.sum((0, 2, 3))


@conv_transpose2d.mutant("stride_in_the_forward_only", kills=["vjp[x]"])
def _(B, x, w, dy):
    """dx read from dy with stride 1 (the forward's stride forgotten in the backward)."""
    H, W = x.shape[2], x.shape[3]
    dyp = pad(dy)
    dx = sum(np.einsum("nohw,co->nchw", window(dyp, i, j, H, W, 1), w[:, :, i, j]) for i, j in TAPS)
    return dx, kernel_grad(x, pad(dy), 2)


@conv_transpose2d.mutant("output_cropped_on_one_side", replaces="forward", kills=["vjp[x]", "vjp[w]"])
def _(B, x, w):
    """The padding cropped twice from the start and not from the end: every output one place off."""
    return spread_grad(x, w)[:, :, 2:, 2:]


@pointwise_conv2d.mutant("input_gradient_summed_over_the_batch", kills=["vjp[x]"])
def _(B, x, w, dy):
    """Every image's dx the batch's sum (a reduction over n kept where it belongs to dw only)."""
    dx = np.einsum("nohw,oc->nchw", dy, w)
    return np.broadcast_to(dx.sum(0, keepdims=True), dx.shape), np.einsum("nohw,nchw->oc", dy, x)


@conv3x3.mutant("dw_taps_transposed", kills=["vjp[w]"])
def _(B, x, w, dy):
    """dw[o, c, i, j] filled from the tap (j, i)."""
    return input_grad(dy, w), kernel_grad(dy, pad(x), tap=TRANSPOSED)


@depthwise_conv7x7.mutant("bias_gradient_of_one_image", kills=["vjp[b]"])
def _(B, x, w, b, dy):
    """db summed over space but not over the batch."""
    return depthwise_input_grad(dy, w), depthwise_kernel_grad(dy, pad(x, 3), 7), dy[0].sum((1, 2))


@conv2d_dilated_grouped.mutant("dx_without_dilation", kills=["vjp[x]"])
def _(B, x, w, dy):
    """dx gathers dy at consecutive taps (the flipped kernel read with dilation 1, padding 1)."""
    H, W = dy.shape[2], dy.shape[3]
    wt = w.reshape(GROUPS, w.shape[0] // GROUPS, *w.shape[1:]).transpose(0, 2, 1, 3, 4)
    return (dilated_correlation(pad(dy, 1), wt, H, W, lambda i, j: (2 - i, 2 - j)),
            dilated_kernel_grad(dy, pad(x, DILATION)))


@conv2d_dilated_grouped.mutant("dw_at_the_undilated_taps", kills=["vjp[w]"])
def _(B, x, w, dy):
    """dw[., ., i, j] from the input at (h + i, w + j) around the padded centre: dilation forgotten."""
    return dilated_input_grad(dy, w), dilated_kernel_grad(dy, pad(x, DILATION), lambda i, j: (1 + i, 1 + j))


@conv2d_dilated_grouped.mutant("dx_groups_swapped", kills=["vjp[x]"])
def _(B, x, w, dy):
    """Each input group's dx computed with the other group's weights (a group offset off by one)."""
    return dilated_input_grad(dy, np.concatenate([w[w.shape[0] // 2:], w[:w.shape[0] // 2]], axis=0)), \
        dilated_kernel_grad(dy, pad(x, DILATION))


@conv2d_dilated_grouped.mutant("dw_summed_over_both_groups", kills=["vjp[w]"])
def _(B, x, w, dy):
    """dw of every group taken against the sum of both input groups (the grouping dropped in dw)."""
    xp = pad(x, DILATION)
    half = xp.shape[1] // 2
    both = xp[:, :half] + xp[:, half:]
    return dilated_input_grad(dy, w), dilated_kernel_grad(dy, np.concatenate([both, both], axis=1))
