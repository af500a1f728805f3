//! A trained denoiser gathered a block at a time (`sharding zero3` over the data ranks,
//! `offload parameters`): its shard, the gathered block with the parameters outside the blocks,
//! and the host's copy, counted by hand from the declared block sizes.

use super::support::{check, codes, component};
use vram_core::budget::CheckBudget;

/// A 14B transformer of 40 blocks (a block 351,392,768 parameters, 232,780,864 outside the
/// blocks) in bf16, with `training` as its training section, on `target`.
fn wan(training: &str, target: &str) -> String {
    format!(
        "model wan {{ params 14_288_491_584; largest_block 351_392_768; outside_blocks 232_780_864 }}\n\
         workload w {{\n runtime none\n diffusion {{ denoiser wan; weights bf16; architecture dit; hidden 5120; ffn 13824; heads 40; layers 40; resolution 832 x 480; frames 21; text_tokens 512 tokens }}\n training {{ {training}; checkpointing full }}\n}}\n\
         machine eight {{ gpus 8 x h100-sxm-80gb; host_ram 1 TiB; disk 8 TB }}\n\
         machine one {{ gpus 1 x h100-sxm-80gb; host_ram 512 GiB; disk 8 TB }}\n\
         check w on {target}"
    )
}

const PARAMS: u64 = 14_288_491_584;
const BLOCK: u64 = 351_392_768;
const OUTSIDE: u64 = 232_780_864;
const GATHERED: &str = "gathered denoiser block (ZeRO-3)";

fn host_ram(check: &CheckBudget, name: &str) -> Option<u64> {
    let host = check.host.as_ref().expect("a machine has host lines");
    host.ram.components.iter().find(|c| c.name == name).map(|c| c.bytes.0)
}

#[test]
fn a_fully_sharded_full_fine_tune_holds_its_shard_and_one_gathered_block() {
    let full = check(&wan("method full; sharding fsdp-full", "eight split data 8"));
    // Each of 8 ranks keeps an eighth of the bf16 weights: 14,288,491,584 × 2 / 8.
    let shard = "denoiser weights (this device's shard): wan";
    assert_eq!(component(&full, shard), Some(PARAMS * 2 / 8));
    // The running block whole, with the parameters outside the blocks, in bf16, and the block's
    // whole gradients before their reduce-scatter, in the gradients' type (fp32 beside the fp32
    // master copy of a bf16 model).
    assert_eq!(component(&full, GATHERED), Some((BLOCK + OUTSIDE) * 2 + BLOCK * 4));
    assert_eq!(component(&full, "denoiser weights: wan"), None);
    // Adapters train no block weights: the gathered block is its weights alone.
    let lora = check(&wan("method lora { rank 32 }; sharding zero3", "eight split data 8"));
    assert_eq!(component(&lora, GATHERED), Some((BLOCK + OUTSIDE) * 2));
    let frozen_shard = "frozen denoiser weights (this device's shard): wan";
    assert_eq!(component(&lora, frozen_shard), Some(PARAMS * 2 / 8));
}

#[test]
fn offloaded_parameters_leave_only_the_gathered_block_on_the_device() {
    let lora = check(&wan("method lora { rank 32 }; offload parameters", "one"));
    assert_eq!(component(&lora, "frozen denoiser weights (this device's shard): wan"), None);
    assert_eq!(component(&lora, GATHERED), Some((BLOCK + OUTSIDE) * 2));
    assert_eq!(host_ram(&lora, "w: frozen parameters offloaded"), Some(PARAMS * 2));
    // Trained in full, the host holds the bf16 parameters, the fp32 master copy and AdamW's two
    // fp32 moments: 2 + 4 + 8 = 14 bytes a parameter.
    let full = check(&wan("method full; offload parameters", "one"));
    let offloaded = "w: parameters, optimizer state and master weights offloaded";
    assert_eq!(host_ram(&full, offloaded), Some(PARAMS * 14));
}

#[test]
fn gathering_needs_the_blocks_and_excludes_swapping() {
    let lora = "method lora { rank 32 }; sharding zero3";
    let no_blocks = wan(lora, "eight split data 8")
        .replace("; largest_block 351_392_768; outside_blocks 232_780_864", "");
    assert_eq!(codes(&no_blocks), ["E011"]);
    let swapped = wan(lora, "eight split data 8")
        .replace("text_tokens 512 tokens", "text_tokens 512 tokens; blocks_to_swap 10");
    assert_eq!(codes(&swapped), ["E014"]);
    // Sharding over one rank leaves every weight on the device.
    let single = check(&wan(lora, "h100-sxm-80gb"));
    assert_eq!(component(&single, "frozen denoiser weights: wan"), Some(PARAMS * 2));
    assert_eq!(component(&single, GATHERED), None);
}
