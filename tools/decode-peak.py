#!/usr/bin/env python3
"""The largest sum of live tensors a diffusers VAE decoder creates, for the core's replay tests.

Runs the reference implementation itself (diffusers, on the CPU, random weights: the sizes of
the tensors do not depend on their values) under a TorchDispatchMode that counts every storage
an operator returns until Python drops it. Weights, buffers and the input latents exist before
the count starts and are left out; views share their base's storage and add nothing. What the
count cannot see is what a kernel allocates for itself (cuDNN's workspaces on a GPU), which the
core does not replay either.

    pip install torch diffusers
    python tools/decode-peak.py ltx 0.9.0 3 8 12        # latent frames, latent height, width
    python tools/decode-peak.py ltx 0.9.5 2 2 3 fp32
    python tools/decode-peak.py ltx 0.9.0 2 20 18 --tiling    # tiles of 512 pixels
    python tools/decode-peak.py wan - 2 34 33 --tiling         # tiles of 256 pixels
    python tools/decode-peak.py hunyuan - 3 16 24 --tile 64 64 # smaller tiles, sooner
    python tools/decode-peak.py wan - 3 16 24 fp32
    python tools/decode-peak.py cogvideox - 3 16 24
    python tools/decode-peak.py hunyuan - 3 16 24
    python tools/decode-peak.py mochi - 3 8 12
    python tools/decode-peak.py mochi - 2 4 6 --batch 2 # two videos at once
    python tools/decode-peak.py kl - 1 16 16             # AutoencoderKL: decode, then encode
    python tools/decode-peak.py dc - 1 4 4               # Sana's DC-AE (frames ignored)

The LTX-Video decoder's configuration for each release is read from diffusers'
scripts/convert_ltx_to_diffusers.py (`get_vae_config`), given with --convert-script. The Wan 2.1,
CogVideoX, HunyuanVideo and Mochi autoencoders are their classes' defaults, which are the
released models' configurations (16 latent channels each, Mochi's 12); their version argument is ignored. `kl` is
the image AutoencoderKL with SDXL's configuration (4 latent channels; `--latent-channels 16`
for SD3's and FLUX's), decoding latents of the given size and encoding pixels 8× as large.
"""

import argparse
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    """Counts the storages operators create, and the largest sum alive at once."""

    def __init__(self, existing):
        super().__init__()
        self.existing = {t.untyped_storage().data_ptr() for t in existing}
        self.live = {}
        self.now = 0
        self.peak = 0

    def _count(self, tensor):
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        size = storage.nbytes()
        if size == 0 or key in self.live or key in self.existing:
            return
        self.live[key] = size
        self.now += size
        self.peak = max(self.peak, self.now)

        def dropped(key=key, size=size):
            if self.live.pop(key, None) is not None:
                self.now -= size

        weakref.finalize(storage, dropped)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self._count(value)
        return out


def ltx_config(script, version):
    """`get_vae_config(version)` from diffusers' conversion script, run on its own."""
    source = open(script, encoding="utf-8").read()
    start = source.index("def get_vae_config")
    end = source.index("\ndef ", start + 1)
    scope = {"VAE_KEYS_RENAME_DICT": {}, "VAE_091_RENAME_DICT": {}, "VAE_095_RENAME_DICT": {}}
    exec("from typing import Any\n" + source[start:end], scope)
    return scope["get_vae_config"](version)


def ltx_peak(script, version, frames, height, width, dtype, tiling=False):
    from diffusers import AutoencoderKLLTXVideo

    config = ltx_config(script, version)
    vae = AutoencoderKLLTXVideo(**config).to(dtype).eval()
    if tiling:
        vae.enable_tiling()
    latents = torch.randn(1, config["latent_channels"], frames, height, width, dtype=dtype)
    timestep = torch.tensor([0.05], dtype=dtype) if config.get("timestep_conditioning") else None
    existing = [*vae.parameters(), *vae.buffers(), latents]
    if timestep is not None:
        existing.append(timestep)
    counter = LiveBytes(existing)
    with torch.no_grad(), counter:
        video = vae.decode(latents, timestep, return_dict=False)[0]
    return counter.peak, tuple(video.shape)


def video_peak(family, frames, height, width, dtype, tiling=False, tile=None, batch=1):
    from diffusers import (
        AutoencoderKLCogVideoX,
        AutoencoderKLHunyuanVideo,
        AutoencoderKLMochi,
        AutoencoderKLWan,
    )

    classes = {
        "wan": AutoencoderKLWan,
        "cogvideox": AutoencoderKLCogVideoX,
        "hunyuan": AutoencoderKLHunyuanVideo,
        "mochi": AutoencoderKLMochi,
    }
    vae = classes[family]().to(dtype).eval()
    if tile is not None and family == "cogvideox":
        # CogVideoX's steps come from its overlap factors.
        vae.enable_tiling(tile_sample_min_height=tile[0], tile_sample_min_width=tile[1])
    elif tile is not None:
        # Wan's, HunyuanVideo's and Mochi's tiles start every three quarters of a tile.
        vae.enable_tiling(
            tile_sample_min_height=tile[0],
            tile_sample_min_width=tile[1],
            tile_sample_stride_height=tile[0] * 3 // 4,
            tile_sample_stride_width=tile[1] * 3 // 4,
        )
    elif tiling:
        vae.enable_tiling()
    latents = torch.randn(batch, vae.config.latent_channels, frames, height, width, dtype=dtype)
    counter = LiveBytes([*vae.parameters(), *vae.buffers(), latents])
    with torch.no_grad(), counter:
        video = vae.decode(latents, return_dict=False)[0]
    return counter.peak, tuple(video.shape)


def dc_peak(height, width, dtype, tiling=False):
    """Sana's DC-AE (`AutoencoderDC` with `scripts/convert_dcae_to_diffusers.py`'s
    dc-ae-f32c32-sana-1.0 configuration: 32 latent channels, 32 pixels to a latent)."""
    from diffusers import AutoencoderDC

    stages = ("ResBlock",) * 3 + ("EfficientViTBlock",) * 3
    vae = AutoencoderDC(
        latent_channels=32,
        encoder_block_types=stages,
        decoder_block_types=stages,
        encoder_block_out_channels=(128, 256, 512, 512, 1024, 1024),
        decoder_block_out_channels=(128, 256, 512, 512, 1024, 1024),
        encoder_qkv_multiscales=((), (), (), (5,), (5,), (5,)),
        decoder_qkv_multiscales=((), (), (), (5,), (5,), (5,)),
        encoder_layers_per_block=(2, 2, 2, 3, 3, 3),
        decoder_layers_per_block=(3, 3, 3, 3, 3, 3),
        downsample_block_type="conv",
        upsample_block_type="interpolate",
        decoder_norm_types="rms_norm",
        decoder_act_fns="silu",
        scaling_factor=0.41407,
    ).to(dtype).eval()
    if tiling:
        vae.enable_tiling()
    latents = torch.randn(1, 32, height, width, dtype=dtype)
    counter = LiveBytes([*vae.parameters(), *vae.buffers(), latents])
    with torch.no_grad(), counter:
        image = vae.decode(latents, return_dict=False)[0]
    return counter.peak, tuple(image.shape)


def kl_peaks(frames, height, width, dtype, latent_channels):
    from diffusers import AutoencoderKL

    vae = AutoencoderKL(
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(128, 256, 512, 512),
        layers_per_block=2,
        latent_channels=latent_channels,
        norm_num_groups=32,
    ).to(dtype).eval()
    latents = torch.randn(frames, latent_channels, height, width, dtype=dtype)
    counter = LiveBytes([*vae.parameters(), *vae.buffers(), latents])
    with torch.no_grad(), counter:
        image = vae.decode(latents, return_dict=False)[0]
    pixels = torch.randn(frames, 3, height * 8, width * 8, dtype=dtype)
    encoded = LiveBytes([*vae.parameters(), *vae.buffers(), pixels])
    with torch.no_grad(), encoded:
        vae.encode(pixels)
    return counter.peak, encoded.peak, tuple(image.shape)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=["ltx", "wan", "cogvideox", "hunyuan", "mochi", "kl", "dc"])
    parser.add_argument("version")
    parser.add_argument("frames", type=int)
    parser.add_argument("height", type=int)
    parser.add_argument("width", type=int)
    parser.add_argument("dtype", nargs="?", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--convert-script", default="scripts/convert_ltx_to_diffusers.py")
    parser.add_argument("--latent-channels", type=int, default=4)
    parser.add_argument("--tiling", action="store_true", help="enable_tiling()")
    parser.add_argument("--batch", type=int, default=1, help="videos decoded together")
    parser.add_argument(
        "--tile", type=int, nargs=2, metavar=("H", "W"), help="enable_tiling() with this tile"
    )
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    if args.family == "kl":
        decode, encode, shape = kl_peaks(
            args.frames, args.height, args.width, dtype, args.latent_channels
        )
        print(f"kl {args.dtype}: decode peak {decode} B, output {shape}; encode peak {encode} B")
        return
    if args.family == "dc":
        peak, shape = dc_peak(args.height, args.width, dtype, args.tiling)
        print(f"dc {args.dtype}: decode peak {peak} B, output {shape}")
        return
    if args.family == "ltx":
        peak, shape = ltx_peak(
            args.convert_script,
            args.version,
            args.frames,
            args.height,
            args.width,
            dtype,
            args.tiling,
        )
    else:
        peak, shape = video_peak(
            args.family,
            args.frames,
            args.height,
            args.width,
            dtype,
            args.tiling,
            args.tile,
            args.batch,
        )
    print(f"{args.family} {args.version} {args.dtype}: peak {peak} B, output {shape}")


if __name__ == "__main__":
    main()
