#!/usr/bin/env python3
"""What a diffusers transformer denoiser holds through one training step, for the core's tests.

The same counter as tools/decode-peak.py (a TorchDispatchMode over every storage an operator
returns until Python drops it; weights, buffers and inputs left out), around diffusers' own
transformer classes on the CPU with random weights: bf16 weights, fp32 LoRA adapters on the
attention projections (as cogvideox-factory, finetrainers and diffusers' LoRA scripts train
them) or, with --full, every weight trained; a mean-squared loss on the output and its backward
pass. It prints the live bytes after the forward pass (what the step stored for the backward
pass) and the peak over both passes.

The forward pass runs under bf16 autocast as a CUDA device applies it (accelerate's
`mixed_precision bf16`), emulated on the CPU by `CudaAutocast`: CPU autocast, plus CUDA's fp32
ops (CPU autocast keeps layer norms and softmaxes in bf16 where CUDA computes them in fp32, which
changes what autograd saves).

    pip install torch diffusers peft
    python tools/dit-train-peak.py cogvideox 2 3 8 12                 # blocks, frames, h, w
    python tools/dit-train-peak.py cogvideox 2 3 8 12 --checkpointing # gradient checkpointing
    python tools/dit-train-peak.py flux 1,0 1 32 48                   # double, single blocks
    python tools/dit-train-peak.py sd3 2 1 64 64 --full

Shapes: CogVideoX-5b (48 heads of 64, 226 text tokens of 4,096), FLUX.1 (24 heads of 128, 512
text tokens), SD3 medium (24 heads of 64, 333 text tokens), Wan 2.1 14B (40 heads of 128,
512 text tokens, MLP 13,824), LTX-Video (32 heads of 64, 128 text tokens, unpatched latents)
and HunyuanVideo (24 heads of 128, blocks "double,single", 256 text tokens), each with the
blocks asked for. Latent height and width are before patching.
"""

import argparse
import importlib.util
import pathlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

HERE = pathlib.Path(__file__).resolve().parent
SPEC = importlib.util.spec_from_file_location("decode_peak", HERE / "decode-peak.py")
DECODE_PEAK = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(DECODE_PEAK)

# The ops PyTorch's CUDA autocast runs in fp32, as its documentation lists them ("CUDA Ops that
# can autocast to float32", torch.amp). CPU autocast runs the same lower-precision ops in bf16
# (linear, matmul, convolutions, attention) but leaves these in their input's type.
FP32 = {
    "__pow__", "__rdiv__", "__rpow__", "__rtruediv__", "acos", "asin", "cosh", "erfinv", "exp",
    "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt", "sinh", "tan", "pow",
    "softplus", "layer_norm", "group_norm", "norm", "normalize", "cosine_similarity",
    "softmax", "log_softmax", "softmin", "cumprod", "cumsum", "dist", "pdist", "cdist", "renorm",
    "logsumexp", "sum", "prod", "mse_loss", "l1_loss", "smooth_l1_loss", "cross_entropy",
    "nll_loss", "kl_div", "binary_cross_entropy_with_logits",
}


def _fp32(value):
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float32:
        return value.float()
    if isinstance(value, (list, tuple)):
        return type(value)(_fp32(v) for v in value)
    return value


class CudaFp32Ops(TorchFunctionMode):
    """Inside CPU autocast, CUDA autocast's fp32 ops: their floating inputs cast to fp32 while
    autocast is on (a block that turns it off, such as a rotary table's, keeps its types)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in FP32 and torch.is_autocast_enabled("cpu"):
            args = _fp32(args)
            kwargs = {k: _fp32(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


class CudaAutocast:
    """bf16 autocast as a CUDA device applies it, for a forward pass run on the CPU."""

    def __enter__(self):
        self.autocast = torch.autocast("cpu", dtype=torch.bfloat16)
        self.mode = CudaFp32Ops()
        self.autocast.__enter__()
        self.mode.__enter__()

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        self.autocast.__exit__(*exc)


def checkpoint_in_autocast(function, *args, **kwargs):
    """diffusers' non-reentrant checkpointing, its recomputation under `CudaFp32Ops` as well
    (torch.utils.checkpoint restores autocast's state, not a function mode)."""

    def run(*inner, **inner_kwargs):
        if torch._C._len_torch_function_stack() > 0:
            return function(*inner, **inner_kwargs)
        with CudaFp32Ops():
            return function(*inner, **inner_kwargs)

    return torch.utils.checkpoint.checkpoint(run, *args, use_reentrant=False, **kwargs)


def cogvideox(blocks, frames, height, width, batch):
    from diffusers import CogVideoXTransformer3DModel

    model = CogVideoXTransformer3DModel(
        num_attention_heads=48, attention_head_dim=64, in_channels=16, out_channels=16,
        time_embed_dim=512, text_embed_dim=4096, num_layers=int(blocks), sample_width=width,
        sample_height=height, sample_frames=(frames - 1) * 4 + 1,
        use_rotary_positional_embeddings=True,
    )
    patches = (height // 2) * (width // 2) * frames
    inputs = {
        "hidden_states": torch.randn(batch, frames, 16, height, width),
        "encoder_hidden_states": torch.randn(batch, 226, 4096),
        "timestep": torch.tensor([500] * batch),
        "image_rotary_emb": (torch.randn(patches, 64), torch.randn(patches, 64)),
    }
    return model, inputs, patches + 226


def flux(blocks, frames, height, width, batch):
    from diffusers import FluxTransformer2DModel

    double, single = (int(n) for n in blocks.split(","))
    model = FluxTransformer2DModel(num_layers=double, num_single_layers=single, guidance_embeds=True)
    patches = (height // 2) * (width // 2)
    img_ids = torch.zeros(patches, 3)
    img_ids[:, 1] = torch.arange(patches) // (width // 2)
    img_ids[:, 2] = torch.arange(patches) % (width // 2)
    inputs = {
        "hidden_states": torch.randn(batch, patches, 64),
        "encoder_hidden_states": torch.randn(batch, 512, 4096),
        "pooled_projections": torch.randn(batch, 768),
        "timestep": torch.tensor([0.5] * batch),
        "guidance": torch.tensor([3.5] * batch),
        "img_ids": img_ids,
        "txt_ids": torch.zeros(512, 3),
    }
    return model, inputs, patches + 512


def sd3(blocks, frames, height, width, batch):
    from diffusers import SD3Transformer2DModel

    model = SD3Transformer2DModel(
        num_layers=int(blocks), attention_head_dim=64, num_attention_heads=24,
        caption_projection_dim=1536, sample_size=max(height, width),
    )
    inputs = {
        "hidden_states": torch.randn(batch, 16, height, width),
        "encoder_hidden_states": torch.randn(batch, 333, 4096),
        "pooled_projections": torch.randn(batch, 2048),
        "timestep": torch.tensor([500] * batch),
    }
    return model, inputs, (height // 2) * (width // 2) + 333


def wan(blocks, frames, height, width, batch):
    from diffusers import WanTransformer3DModel

    model = WanTransformer3DModel(num_layers=int(blocks))
    inputs = {
        "hidden_states": torch.randn(batch, 16, frames, height, width),
        "encoder_hidden_states": torch.randn(batch, 512, 4096),
        "timestep": torch.tensor([500] * batch),
    }
    return model, inputs, (height // 2) * (width // 2) * frames


def ltx(blocks, frames, height, width, batch):
    from diffusers import LTXVideoTransformer3DModel

    model = LTXVideoTransformer3DModel(num_layers=int(blocks))
    tokens = frames * height * width  # 1 × 1 patches of 32 × 32 × 8 latents
    inputs = {
        "hidden_states": torch.randn(batch, tokens, 128),
        "encoder_hidden_states": torch.randn(batch, 128, 4096),
        "timestep": torch.tensor([500] * batch),
        "encoder_attention_mask": torch.ones(batch, 128),
        "num_frames": frames,
        "height": height,
        "width": width,
    }
    return model, inputs, tokens


def hunyuan(blocks, frames, height, width, batch):
    from diffusers import HunyuanVideoTransformer3DModel

    double, single = (int(n) for n in blocks.split(","))
    model = HunyuanVideoTransformer3DModel(num_layers=double, num_single_layers=single)
    inputs = {
        "hidden_states": torch.randn(batch, 16, frames, height, width),
        "timestep": torch.tensor([500] * batch),
        "encoder_hidden_states": torch.randn(batch, 256, 4096),
        "encoder_attention_mask": torch.ones(batch, 256),
        "pooled_projections": torch.randn(batch, 768),
        "guidance": torch.tensor([6000.0] * batch),
    }
    return model, inputs, (height // 2) * (width // 2) * frames + 256


FAMILIES = {
    "cogvideox": cogvideox, "flux": flux, "sd3": sd3, "wan": wan, "ltx": ltx, "hunyuan": hunyuan,
}


def step(family, blocks, frames, height, width, batch, checkpointing, full, rank):
    torch.manual_seed(0)
    model, inputs, tokens = FAMILIES[family](blocks, frames, height, width, batch)
    model = model.to(torch.bfloat16)
    if full:
        model.requires_grad_(True)
    else:
        from peft import LoraConfig

        model.requires_grad_(False)
        model.add_adapter(
            LoraConfig(r=rank, lora_alpha=rank, target_modules=["to_q", "to_k", "to_v", "to_out.0"])
        )
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()
    if checkpointing:
        model.enable_gradient_checkpointing(gradient_checkpointing_func=checkpoint_in_autocast)
    model.train()
    inputs = {
        k: (v.to(torch.bfloat16) if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() > 2 else v)
        for k, v in inputs.items()
    }
    flat = [
        v
        for value in inputs.values()
        for v in (value if isinstance(value, tuple) else (value,))
        if isinstance(v, torch.Tensor)
    ]
    existing = [*model.parameters(), *model.buffers(), *flat]
    counter = DECODE_PEAK.LiveBytes(existing)
    with counter:
        with CudaAutocast():
            out = model(**inputs, return_dict=False)[0]
        loss = F.mse_loss(out.float(), torch.zeros_like(out, dtype=torch.float32))
        stored = counter.now
        loss.backward()
    return stored, counter.peak, tokens


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("family", choices=sorted(FAMILIES))
    parser.add_argument("blocks", help="blocks (FLUX: double,single)")
    parser.add_argument("frames", type=int, help="latent frames (1 for images)")
    parser.add_argument("height", type=int, help="latent height")
    parser.add_argument("width", type=int, help="latent width")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--full", action="store_true", help="train every weight, not LoRA")
    parser.add_argument("--checkpointing", action="store_true")
    args = parser.parse_args()
    stored, peak, tokens = step(
        args.family, args.blocks, args.frames, args.height, args.width, args.batch,
        args.checkpointing, args.full, args.rank,
    )
    print(f"tokens {tokens} per sample: stored after forward {stored} B, peak {peak} B")


if __name__ == "__main__":
    main()
