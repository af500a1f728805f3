#!/usr/bin/env python3
"""What one training step of a Stable Diffusion 1.5 UNet stores for its backward pass, for the
core's tests.

The counter of tools/decode-peak.py (every storage an operator returns, until Python drops it;
weights, buffers and inputs left out) around a training step on the CPU with random weights,
in fp32 as diffusers' scripts run without mixed precision: SD 1.5's UNet (its
unet/config.json), and, by mode,
- `full`: every UNet weight trained (train_text_to_image.py, train_dreambooth.py);
- `lora`: the UNet frozen with PEFT LoRA adapters on to_q, to_k, to_v and to_out.0
  (train_text_to_image_lora.py, train_dreambooth_lora.py);
- `controlnet`: the UNet frozen (and in eval mode, as from_pretrained leaves it) beside a
  ControlNet made with `ControlNetModel.from_unet` and trained, whose residuals go into the UNet
  (train_controlnet.py);
then a mean-squared loss on the UNet's output and the backward pass. It prints the live bytes
after the forward pass (what the step keeps for the backward pass; for `controlnet` also after
the ControlNet's own forward, its residuals among them) and the peak over both passes.

    pip install torch diffusers accelerate peft
    python tools/unet-train-peak.py controlnet 32 32                  # latent height, width
    python tools/unet-train-peak.py controlnet 32 32 --checkpointing  # the ControlNet's blocks
    python tools/unet-train-peak.py lora 32 32
    python tools/unet-train-peak.py full 32 32 --checkpointing
    python tools/unet-train-peak.py lora 32 32 --sdxl                 # SDXL base 1.0's UNet

PyTorch's CPU attention (SDPA's flash kernel) keeps its output and log-sum-exp, as fused
attention does on a GPU.
"""

import argparse
import importlib.util
import pathlib

import torch
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent
SPEC = importlib.util.spec_from_file_location("decode_peak", HERE / "decode-peak.py")
DECODE_PEAK = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(DECODE_PEAK)

# stable-diffusion-v1-5/stable-diffusion-v1-5 unet/config.json.
SD15_UNET = dict(
    sample_size=64,
    in_channels=4,
    out_channels=4,
    down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
    up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
    block_out_channels=(320, 640, 1280, 1280),
    layers_per_block=2,
    cross_attention_dim=768,
    attention_head_dim=8,
)


# stabilityai/stable-diffusion-xl-base-1.0 unet/config.json (its text_time embedding needs the
# pooled text and the size conditioning, given below).
SDXL_UNET = dict(
    sample_size=128,
    in_channels=4,
    out_channels=4,
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
    block_out_channels=(320, 640, 1280),
    layers_per_block=2,
    cross_attention_dim=2048,
    attention_head_dim=(5, 10, 20),
    transformer_layers_per_block=(1, 2, 10),
    use_linear_projection=True,
    addition_embed_type="text_time",
    addition_time_embed_dim=256,
    projection_class_embeddings_input_dim=2816,
)


def step(mode, height, width, batch, checkpointing, sdxl=False):
    from diffusers import ControlNetModel, UNet2DConditionModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(**(SDXL_UNET if sdxl else SD15_UNET))
    controlnet = None
    if mode == "full":
        unet.train()
        if checkpointing:
            unet.enable_gradient_checkpointing()
    elif mode == "lora":
        from peft import LoraConfig

        unet.requires_grad_(False)
        unet.add_adapter(
            LoraConfig(r=4, lora_alpha=4, target_modules=["to_q", "to_k", "to_v", "to_out.0"])
        )
        unet.train()
        if checkpointing:
            unet.enable_gradient_checkpointing()
    else:
        controlnet = ControlNetModel.from_unet(unet)
        unet.requires_grad_(False)
        unet.eval()
        controlnet.train()
        if checkpointing:
            controlnet.enable_gradient_checkpointing()
    latents = torch.randn(batch, 4, height, width)
    timesteps = torch.tensor([500] * batch)
    text = torch.randn(batch, 77, 2048 if sdxl else 768)
    image = torch.randn(batch, 3, height * 8, width * 8)
    added = {}
    if sdxl:
        added = {
            "added_cond_kwargs": {
                "text_embeds": torch.randn(batch, 1280),
                "time_ids": torch.randn(batch, 6),
            }
        }
    existing = [*unet.parameters(), *unet.buffers(), latents, timesteps, text, image]
    existing += [t for t in added.get("added_cond_kwargs", {}).values()]
    if controlnet is not None:
        existing += [*controlnet.parameters(), *controlnet.buffers()]
    counter = DECODE_PEAK.LiveBytes(existing)
    residuals = {}
    controlnet_stored = None
    with counter:
        if controlnet is not None:
            down, mid = controlnet(
                latents, timesteps, encoder_hidden_states=text, controlnet_cond=image,
                return_dict=False, **added,
            )
            controlnet_stored = counter.now
            residuals = {
                "down_block_additional_residuals": list(down),
                "mid_block_additional_residual": mid,
            }
        pred = unet(
            latents, timesteps, encoder_hidden_states=text, return_dict=False, **residuals, **added
        )
        pred = pred[0]
        loss = F.mse_loss(pred.float(), torch.zeros_like(pred), reduction="mean")
        stored = counter.now
        loss.backward()
    return controlnet_stored, stored, counter.peak


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["full", "lora", "controlnet"])
    parser.add_argument("height", type=int, help="latent height")
    parser.add_argument("width", type=int, help="latent width")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--sdxl", action="store_true", help="SDXL's UNet instead of SD 1.5's")
    args = parser.parse_args()
    controlnet, stored, peak = step(
        args.mode, args.height, args.width, args.batch, args.checkpointing, args.sdxl
    )
    if controlnet is not None:
        print(f"stored after the ControlNet's forward {controlnet} B")
    print(f"stored after the forward pass {stored} B, peak {peak} B")


if __name__ == "__main__":
    main()
