//! The framebuffer the driver keeps (`reserved` in a device block): verdicts and KV pools are
//! measured against what is left, CUDA's total, not nvidia-smi's.

use vram_core::budget::{Category, CheckBudget, HeldBy, Verdict};

const MIB: u64 = 1024 * 1024;

fn evaluate(source: &str) -> Vec<CheckBudget> {
    let outcome = vram_core::evaluate(source);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks
}

fn gpu(reserved: &str) -> String {
    format!(
        "device card \"Test card\" {{ memory 24576 MiB{reserved}; arch ampere; precisions fp32 fp16 bf16 }}\n"
    )
}

const CHAT: &str = "workload chat { model llama3.1-8b; inference { weights bf16; context 4096 \
                    tokens; sessions 1 } }\ncheck chat on card\n";

#[test]
fn the_verdict_counts_only_what_the_driver_leaves() {
    let open = evaluate(&format!("{}{CHAT}", gpu("")));
    let kept = evaluate(&format!("{}{CHAT}", gpu("; reserved 700 MiB")));
    let (open, kept) = (&open[0].devices[0], &kept[0].devices[0]);
    assert_eq!(open.capacity.reserved.0, 0);
    assert_eq!(open.capacity.usable.0, 24576 * MIB);
    assert_eq!(kept.capacity.bytes.0, 24576 * MIB);
    assert_eq!(kept.capacity.reserved.0, 700 * MIB);
    assert_eq!(kept.capacity.usable.0, (24576 - 700) * MIB);
    // The components do not change; only the room left does, by the reserve exactly.
    assert_eq!(open.required, kept.required);
    let (Verdict::Fits { free: before }, Verdict::Fits { free: after }) =
        (&open.verdict, &kept.verdict)
    else {
        panic!("both fit: {:?} {:?}", open.verdict, kept.verdict);
    };
    assert_eq!(before.0 - after.0, 700 * MIB);
}

#[test]
fn a_reserve_larger_than_the_room_left_turns_fits_into_over() {
    let open = evaluate(&format!("{}{CHAT}", gpu("")));
    let Verdict::Fits { free } = open[0].devices[0].verdict else { panic!("fits without") };
    // One MiB more than the free room: the same workload no longer fits, over by that MiB.
    let reserve = free.0.div_ceil(MIB) + 1;
    let kept = evaluate(&format!("{}{CHAT}", gpu(&format!("; reserved {reserve} MiB"))));
    let device = &kept[0].devices[0];
    assert_eq!(
        device.verdict,
        Verdict::Over { over: vram_core::bytes::Bytes(reserve * MIB - free.0) }
    );
}

#[test]
fn vllm_takes_its_share_of_cuda_s_total() {
    let serve = "workload serve { model llama3.1-8b; runtime vllm; inference { weights bf16; \
                 context 4096 tokens; sessions 4 } }\ncheck serve on card\n";
    let kept = evaluate(&format!("{}{serve}", gpu("; reserved 700 MiB")));
    let device = &kept[0].devices[0];
    let pool = device.kv_pool.clone().expect("vLLM reports its pool");
    // Everything vLLM holds besides the pool (its graphs, in the allocator's cache, come later).
    let carved: u64 = device
        .components
        .iter()
        .filter(|c| c.category != Category::Cache && c.held_by != HeldBy::AllocatorCache)
        .map(|c| c.bytes.0)
        .sum();
    // 90 % of 23,876 MiB, less the rest, in blocks of 16 tokens of 131,072 B.
    let share = (24576 - 700) * MIB * 9 / 10;
    let per_block = 16 * 131_072;
    assert_eq!(pool.tokens, (share - carved) / per_block * 16);
    let open = evaluate(&format!("{}{serve}", gpu("")));
    let before = open[0].devices[0].kv_pool.clone().expect("pool").tokens;
    assert!(before > pool.tokens, "{before} tokens without the reserve, {} with", pool.tokens);
}

#[test]
fn a_reserve_of_the_whole_memory_is_refused() {
    let outcome = vram_core::evaluate(&format!("{}{CHAT}", gpu("; reserved 24576 MiB")));
    let error = outcome.diagnostics.iter().find(|d| d.is_error()).expect("an error");
    assert_eq!(error.code, "E007");
    assert!(error.message.contains("`reserved`"), "{}", error.message);
}
