#!/usr/bin/env python3
"""The largest sum of live tensors a small Llama creates in transformers, for the core's tests.

The same counter as tools/decode-peak.py (a TorchDispatchMode over every storage an operator
returns until Python drops it; weights, buffers and inputs left out), around transformers' own
code on the CPU with random weights: a `generate` after a prompt, or fp32 training steps with
AdamW's foreach implementation (the one PyTorch picks on a GPU). The model is a 4-layer Llama of
hidden 1024, MLP 2816, 16 query and 4 key/value heads of 64, vocabulary 32,000, untied.

    pip install torch transformers
    python tools/transformers-peak.py generate 2048 16    # prompt tokens, new tokens
    python tools/transformers-peak.py train 512           # sequence tokens
    python tools/transformers-peak.py lora 1024           # PEFT LoRA, checkpointed (needs peft)
    python tools/transformers-peak.py lora-step 2048 --layers 3   # one LoRA step, CUDA autocast
    python tools/transformers-peak.py lora-step 2048 --layers 2 --checkpointing

What a GPU adds and a CPU run cannot show (the CUDA context, cuBLAS's workspace, the caching
allocator's rounding and cache) is the core's other components; the tests compare the rest.
"""

import argparse
import importlib.util
import pathlib

import torch
from transformers import LlamaConfig, LlamaForCausalLM

HERE = pathlib.Path(__file__).resolve().parent
SPEC = importlib.util.spec_from_file_location("decode_peak", HERE / "decode-peak.py")
DECODE_PEAK = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(DECODE_PEAK)
SPEC = importlib.util.spec_from_file_location("dit_train_peak", HERE / "dit-train-peak.py")
DIT_PEAK = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(DIT_PEAK)


def model(layers=4, vocab=32000):
    config = LlamaConfig(
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=4,
        vocab_size=vocab,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def generate(prompt, new):
    llama = model().to(torch.bfloat16).eval()
    ids = torch.randint(0, 32000, (1, prompt))
    counter = DECODE_PEAK.LiveBytes([*llama.parameters(), *llama.buffers(), ids])
    with torch.no_grad(), counter:
        llama.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)
    return counter.peak


def steps(llama, ids, autocast):
    """Two training steps under the counter (the first creates the optimizer's states, the
    second runs beside them), AdamW's foreach implementation over the trained parameters."""
    trained = [p for p in llama.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=1e-5, foreach=True)
    counter = DECODE_PEAK.LiveBytes([*llama.parameters(), *llama.buffers(), ids])
    with counter:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = llama(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            del loss
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return counter.peak


def train(tokens):
    llama = model().float().train()
    return steps(llama, torch.randint(0, 32000, (1, tokens)), autocast=False)


def lora(tokens):
    """PEFT LoRA (rank 16 on every projection, fp32 adapters) over the bf16 model, full
    non-reentrant checkpointing, the forward under bf16 autocast (as the Trainer's `bf16`)."""
    from peft import LoraConfig, get_peft_model

    llama = model().to(torch.bfloat16)
    llama.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    llama.enable_input_require_grads()
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=targets)
    llama = get_peft_model(llama, config)
    llama.train()
    return steps(llama, torch.randint(0, 32000, (1, tokens)), autocast=True)


def lora_step(tokens, layers, checkpointing):
    """One forward and backward pass of PEFT LoRA (rank 16 on every projection, fp32 adapters,
    no dropout) over the bf16 model with `layers` layers and a 512-token vocabulary (so that the
    layers, not the loss, hold the peak), under bf16 autocast as CUDA applies it
    (`tools/dit-train-peak.py`'s `CudaAutocast`), with or without non-reentrant checkpointing.
    Returns what the forward pass left stored and the peak."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    llama = model(layers=layers, vocab=512).to(torch.bfloat16)
    if checkpointing:
        llama.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        for module in llama.modules():
            if hasattr(module, "_gradient_checkpointing_func"):
                module._gradient_checkpointing_func = DIT_PEAK.checkpoint_in_autocast
    llama.enable_input_require_grads()
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    llama = get_peft_model(llama, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=targets))
    llama.train()
    ids = torch.randint(0, 512, (1, tokens))
    counter = DECODE_PEAK.LiveBytes([*llama.parameters(), *llama.buffers(), ids])
    with counter:
        with DIT_PEAK.CudaAutocast():
            loss = llama(input_ids=ids, labels=ids, use_cache=False).loss
        stored = counter.now
        loss.backward()
    return stored, counter.peak


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", choices=["generate", "train", "lora", "lora-step"])
    parser.add_argument("tokens", type=int)
    parser.add_argument("new", type=int, nargs="?", default=16)
    parser.add_argument("--layers", type=int, default=2, help="lora-step: layers")
    parser.add_argument("--checkpointing", action="store_true", help="lora-step: checkpointing")
    args = parser.parse_args()
    if args.run == "generate":
        print(f"generate {args.tokens} + {args.new}: peak {generate(args.tokens, args.new)} B")
    elif args.run == "lora":
        print(f"lora {args.tokens}: peak {lora(args.tokens)} B")
    elif args.run == "lora-step":
        stored, peak = lora_step(args.tokens, args.layers, args.checkpointing)
        print(f"lora-step {args.tokens} tokens, {args.layers} layers: stored {stored} B, peak {peak} B")
    else:
        print(f"train {args.tokens}: peak {train(args.tokens)} B")


if __name__ == "__main__":
    main()
