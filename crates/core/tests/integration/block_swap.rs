//! Block swapping of a transformer denoiser (`blocks_to_swap`, `single_blocks_to_swap`), trained
//! or sampled: the swapped blocks' weights leave the device for the host RAM line, counted by
//! hand from the declared block sizes; and the settings it cannot go with.

use super::support::{check, codes, component};
use vram_core::budget::CheckBudget;

/// FLUX.1-dev's transformer (11,901,410,000 parameters; a double block 339,831,296, outside the
/// blocks 64,124,992) in fp8, trained with LoRA on a machine with host RAM, `swap` added to its
/// diffusion section and `training` as its method.
fn flux(swap: &str, method: &str) -> String {
    format!(
        "model flux {{ params 11_901.41 million; largest_block 339_831_296; outside_blocks 64_124_992 }}\n\
         workload w {{\n runtime none\n diffusion {{ denoiser flux; weights bf16; denoiser_weights fp8; architecture dit; hidden 3072; heads 24; layers 57; single_layers 38; resolution 1024 x 1024; text_tokens 512 tokens{swap} }}\n training {{ {method}; checkpointing full }}\n}}\n\
         machine pc {{ gpus 1 x rtx-4090; host_ram 64 GiB; disk 2 TB }}\n\
         check w on pc"
    )
}

fn host_ram(check: &CheckBudget, name: &str) -> Option<u64> {
    let host = check.host.as_ref().expect("a machine has host lines");
    host.ram.components.iter().find(|c| c.name == name).map(|c| c.bytes.0)
}

const SWAPPED: &str = "w: denoiser blocks swapped to the host";
const ON_DEVICE: &str = "frozen denoiser weights on the device: flux";

#[test]
fn flux_swaps_double_and_single_blocks_by_their_own_sizes() {
    // A single-stream block: (11,901,410,000 − 64,124,992 − 19 × 339,831,296) / 38
    // = 5,380,490,384 / 38 = 141,591,852 parameters (rounded down).
    // kohya's `--blocks_to_swap 18` for FLUX: 9 double and 18 single blocks,
    // 9 × 339,831,296 + 18 × 141,591,852 = 3,058,481,664 + 2,548,653,336 = 5,607,135,000, one
    // byte each in fp8.
    let swapped =
        check(&flux("; blocks_to_swap 9; single_blocks_to_swap 18", "method lora { rank 16 }"));
    assert_eq!(component(&swapped, ON_DEVICE), Some(11_901_410_000 - 5_607_135_000));
    assert_eq!(host_ram(&swapped, SWAPPED), Some(5_607_135_000));
    assert_eq!(component(&swapped, "frozen denoiser weights: flux"), None);
    // Nothing else on the device moves: the adapters and activations are the same as unswapped.
    let whole = check(&flux("", "method lora { rank 16 }"));
    assert_eq!(component(&whole, "frozen denoiser weights: flux"), Some(11_901_410_000));
    assert_eq!(host_ram(&whole, SWAPPED), None);
    for name in ["LoRA adapters", "denoiser activations"] {
        assert_eq!(component(&swapped, name), component(&whole, name), "{name}");
        assert!(component(&whole, name).is_some(), "{name}");
    }
    // The files still hold every weight: the ones on the device and the swapped ones.
    let disk = &swapped.host.as_ref().unwrap().disk;
    assert_eq!(disk.required.0, 11_901_410_000);
}

#[test]
fn a_model_of_equal_blocks_shares_its_block_parameters_out() {
    // 40 equal blocks (a Wan-like transformer): (14,000,000,000 − 200,000,000) / 40
    // = 345,000,000 parameters a block; 10 swapped in bf16: 3,450,000,000 × 2 B.
    let source = "model dit { params 14 billion; largest_block 345_000_000; outside_blocks 200_000_000 }\n\
         workload w {\n runtime none\n diffusion { denoiser dit; weights bf16; architecture dit; hidden 5120; heads 40; ffn 13824; layers 40; resolution 832 x 480; text_tokens 512 tokens; blocks_to_swap 10 }\n training { method lora { rank 32 }; checkpointing full }\n}\n\
         machine pc { gpus 1 x rtx-4090; host_ram 128 GiB; disk 2 TB }\n\
         check w on pc";
    let swapped = check(source);
    assert_eq!(
        component(&swapped, "frozen denoiser weights on the device: dit"),
        Some(2 * 10_550_000_000)
    );
    assert_eq!(host_ram(&swapped, SWAPPED), Some(2 * 3_450_000_000));
}

#[test]
fn swapping_is_refused_where_it_is_not_modelled() {
    let lora = "method lora { rank 16 }";
    // One block of each kind stays on the device to swap into: 18 of 19 double blocks at most.
    assert_eq!(codes(&flux("; blocks_to_swap 19", lora)), ["E007"]);
    assert!(codes(&flux("; blocks_to_swap 18; single_blocks_to_swap 37", lora)).is_empty());
    // The frozen base is swapped; a full fine-tune's own weights and states are not modelled.
    let full = flux("; blocks_to_swap 4", "method full").replace("denoiser_weights fp8; ", "");
    assert_eq!(codes(&full), ["E014"]);
    // Without single-stream blocks there are none to swap.
    let uniform = flux("; single_blocks_to_swap 4", lora).replace("; single_layers 38", "");
    assert_eq!(codes(&uniform), ["E014"]);
    // The blocks' sizes come from the model.
    let no_blocks = flux("; blocks_to_swap 4", lora)
        .replace("; largest_block 339_831_296; outside_blocks 64_124_992", "");
    assert_eq!(codes(&no_blocks), ["E011"]);
    // Beside an offload, or experts taking turns, a swap is not modelled.
    let sampled = |extra: &str| {
        format!(
            "model flux {{ params 11_901.41 million; largest_block 339_831_296; outside_blocks 64_124_992 }}\n\
             workload w {{\n diffusion {{ denoiser flux; weights bf16; architecture dit; hidden 3072; heads 24; layers 57; single_layers 38; resolution 1024 x 1024; blocks_to_swap 4{extra} }}\n}}\n\
             check w on rtx-4090"
        )
    };
    assert!(codes(&sampled("")).is_empty());
    assert_eq!(codes(&sampled("; offload model")), ["E014"]);
    assert_eq!(codes(&sampled("; denoiser_experts 2")), ["E014"]);
    // A trained pipeline refuses the offload itself; the swap adds nothing to that.
    assert_eq!(codes(&flux("; blocks_to_swap 4; offload model", lora)), ["E013"]);
    // A UNet's blocks are not swapped.
    let unet = "model unet { params 860 million; largest_block 100_000_000; outside_blocks 10_000_000 }\n\
         workload w {\n runtime none\n diffusion { denoiser unet; weights bf16; architecture unet; hidden 320; heads 8; channel_mult 1 2 4 4; layers_per_block 2; cross_attention_dim 768; resolution 512 x 512; blocks_to_swap 2 }\n training { method lora { rank 4 } }\n}\n\
         check w on rtx-4090";
    assert_eq!(codes(unet), ["E013"]);
}

#[test]
fn an_over_budget_step_is_offered_the_fewest_blocks_that_fit() {
    use vram_core::budget::SuggestionKind;
    // The same LoRA step on a 12 GB card, which it does not fit with every block on the device.
    let on = |swap: &str| {
        flux(swap, "method lora { rank 16 }; activations bf16; optimizer adamw-8bit")
            .replace("gpus 1 x rtx-4090", "gpus 1 x card")
            + "\ndevice card { memory 12 GB marketed; arch ada; compute 8.9; precisions fp32 tf32 fp16 bf16 fp8 int8; vendor nvidia }"
    };
    let over = vram_core::evaluate(&on("")).budget.checks.remove(0);
    assert!(!over.verdict.fits());
    let offered = over.suggestions.iter().find(|s| s.kind == SuggestionKind::Pipeline);
    let change = &offered.expect("a block swap is offered").change;
    // "blocks_to_swap D, single_blocks_to_swap S", shared as the kinds' counts are (19 : 38).
    let counts: Vec<u64> =
        change.split(", ").map(|part| part.rsplit(' ').next().unwrap().parse().unwrap()).collect();
    let [double, single] = counts[..] else { panic!("two counts in {change:?}") };
    assert_eq!((double + single) * 19 / 57, double, "{change}");
    let fits = |double: u64, single: u64| {
        let swap = format!("; blocks_to_swap {double}; single_blocks_to_swap {single}");
        check(&on(&swap)).verdict.fits()
    };
    assert!(fits(double, single));
    // One block fewer, shared the same way, is over.
    let fewer = double + single - 1;
    assert!(!fits(fewer * 19 / 57, fewer - fewer * 19 / 57));
}

#[test]
fn a_sampled_pipeline_swaps_the_same_blocks() {
    // Wan-like, 40 equal blocks of (14,000,000,000 − 200,000,000) / 40 = 345,000,000
    // parameters in bf16; 20 swapped leave 14,000,000,000 − 6,900,000,000 on the device.
    let source = |swap: &str| {
        format!(
            "model dit {{ params 14 billion; largest_block 345_000_000; outside_blocks 200_000_000 }}\n\
             workload w {{\n diffusion {{ denoiser dit; weights bf16; architecture dit; hidden 5120; heads 40; ffn 13824; layers 40; resolution 832 x 480; frames 21{swap} }}\n}}\n\
             machine pc {{ gpus 1 x rtx-4090; host_ram 64 GiB; disk 2 TB }}\n\
             check w on pc"
        )
    };
    let swapped = check(&source("; blocks_to_swap 20"));
    let on_device = "denoiser weights on the device: dit";
    assert_eq!(component(&swapped, on_device), Some(2 * 7_100_000_000));
    assert_eq!(host_ram(&swapped, SWAPPED), Some(2 * 6_900_000_000));
    // The step's tensors are the unswapped pipeline's.
    let whole = check(&source(""));
    assert_eq!(component(&whole, "denoiser weights: dit"), Some(2 * 14_000_000_000));
    let step = "denoiser activations (one block)";
    assert!(component(&whole, step).is_some());
    assert_eq!(component(&swapped, step), component(&whole, step));
}

#[test]
fn offloaded_checkpoints_leave_two_block_inputs_on_the_device() {
    // kohya's `--cpu_offload_checkpointing`: of the 57 block inputs full checkpointing keeps
    // (4,608 tokens × 3,072 hidden × 2 B each at 1024² with 512 text tokens), two stay on the
    // device; the recomputed block is the same.
    let lora = "method lora { rank 16 }";
    let kept = check(&flux("", lora));
    let offloaded = check(&flux("", &format!("{lora}; offload_activations true")));
    let input = 4_608 * 3_072 * 2;
    let name = "denoiser activations";
    assert_eq!(
        component(&kept, name).unwrap() - component(&offloaded, name).unwrap(),
        (57 - 2) * input
    );
    // Without checkpointing there are no block inputs to offload.
    let unchecked = flux("", &format!("{lora}; offload_activations true"))
        .replace("checkpointing full", "checkpointing none");
    assert_eq!(codes(&unchecked), ["E014"]);
}
