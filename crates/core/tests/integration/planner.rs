//! Co-residency, heterogeneous machines, host lines and `find` answers, through `evaluate`.

use vram_core::budget::{CheckBudget, QueryKind, SuggestionKind, Verdict};

fn checks(source: &str) -> Vec<CheckBudget> {
    let outcome = vram_core::evaluate(source);
    assert!(
        !outcome.diagnostics.iter().any(vram_core::diagnostic::Diagnostic::is_error),
        "{:#?}",
        outcome.diagnostics
    );
    outcome.budget.checks
}

const TWO: &str = "
workload a { model llama3.1-8b; runtime pytorch; inference { weights bf16; context 4096 tokens; sessions 2 } }
workload b { model qwen2.5-0.5b; runtime pytorch; inference { weights bf16; context 2048 tokens; sessions 8 } }
";

#[test]
fn co_resident_workloads_add_up_with_a_runtime_each() {
    let together = checks(&format!("{TWO}check a + b on l40s\ncheck a on l40s\ncheck b on l40s"));
    let (both, a, b) = (&together[0], &together[1], &together[2]);
    assert_eq!(both.id, "a + b on l40s");
    assert_eq!(both.devices[0].used.0, a.devices[0].used.0 + b.devices[0].used.0);
    let contexts = both.devices[0]
        .components
        .iter()
        .filter(|c| c.name.ends_with("CUDA context and kernels"))
        .count();
    assert_eq!(contexts, 2, "each process has its own CUDA context");
    assert!(
        both.devices[0]
            .components
            .iter()
            .all(|c| c.name.starts_with("a: ") || c.name.starts_with("b: "))
    );
}

#[test]
fn pipeline_stages_on_unequal_gpus_follow_memory() {
    let source = "
machine mixed { gpus 1 x rtx-4090; gpus 1 x rtx-6000-ada }
machine same { gpus 2 x rtx-6000-ada }
workload w { model llama3.1-70b; runtime llama.cpp; inference { weights q4_k_m; context 4096 tokens } }
check w on mixed split pipeline 2
check w on same split pipeline 2
check w on 2 x rtx-6000-ada split pipeline 2
";
    let all = checks(source);
    assert!(all[0].notes.iter().any(|n| n.contains("(27 / 53)")), "{:?}", all[0].notes);
    // Identical GPUs keep the even division: the machine and the plain count agree.
    assert_eq!(all[1].devices, all[2].devices);
    assert!(all[1].notes.iter().all(|n| !n.contains("proportion")));
}

#[test]
fn host_ram_over_makes_a_machine_check_fail_and_bare_devices_have_no_host() {
    let source = "
machine tight { gpus 1 x l40s; host_ram 8 GiB; disk 1 TB }
machine roomy { gpus 1 x l40s; host_ram 64 GiB; disk 1 TB }
workload w { model llama3.1-8b; runtime pytorch; inference { weights bf16; context 4096 tokens } }
check w on tight
check w on roomy
check w on l40s
";
    let all = checks(source);
    let tight = all[0].host.as_ref().expect("a machine has host lines");
    assert!(matches!(tight.ram.verdict, Some(Verdict::Over { .. })));
    assert!(all[0].devices[0].verdict.fits());
    assert!(!all[0].verdict.fits(), "the check fails on its host line");
    assert!(all[1].verdict.fits());
    let staged = &all[1].host.as_ref().expect("host").ram.components[0];
    let weights: u64 = all[1].devices[0]
        .components
        .iter()
        .filter(|c| c.category == vram_core::budget::Category::Persistent)
        .map(|c| c.bytes.0)
        .sum();
    assert_eq!(staged.bytes.0, weights, "one copy of the weights is staged");
    assert!(all[2].host.is_none());
}

#[test]
fn every_query_kind_is_answered() {
    let source = "
workload chat { model llama3.1-8b; runtime vllm; inference { weights bf16; context 8192 tokens; sessions 8 } }
workload tune { model qwen2.5-7b; runtime pytorch; training { method lora { rank 16; targets all }; weights bf16; optimizer adamw; micro_batch 16; sequence 2048 tokens; checkpointing full } }
find max sessions for chat on l4
find max context for chat on l4
find precision for chat on l4
find min gpus of l4 for chat
find machines in catalog for chat
find max batch for tune on rtx-4090
";
    let outcome = vram_core::evaluate(source);
    let kinds: Vec<QueryKind> = outcome.budget.queries.iter().map(|q| q.kind).collect();
    assert_eq!(
        kinds,
        [
            QueryKind::MaxSessions,
            QueryKind::MaxContext,
            QueryKind::Precision,
            QueryKind::MinDevices,
            QueryKind::Machines,
            QueryKind::MaxBatch
        ]
    );
    assert!(
        outcome.budget.queries.iter().all(|q| q.answer != "nothing fits"),
        "{:#?}",
        outcome.budget.queries
    );
    let machines = &outcome.budget.queries[4].machines;
    assert!(machines.windows(2).all(|w| w[0].gpu_memory <= w[1].gpu_memory), "smallest first");
    assert!(outcome.diagnostics.iter().any(|d| d.code == "W004"), "a precision change warns");
}

#[test]
fn precision_falls_back_to_an_fp8_kv_cache_when_weights_alone_do_not_fit() {
    let source = "
workload chat { model llama3.1-8b; runtime vllm; inference { weights bf16; context 8192 tokens; sessions 16 } }
find precision for chat on l4
";
    let outcome = vram_core::evaluate(source);
    let answer = &outcome.budget.queries[0];
    assert!(answer.answer.ends_with("kv_cache fp8"), "{answer:#?}");
    assert!(answer.warning.is_some());
}

/// The models of `examples/diffusion-flux.vram` and a FLUX.1-dev workload at `resolution`, with
/// `extra` lines in its diffusion block, checked on `device`.
fn flux(resolution: &str, extra: &str, device: &str) -> String {
    let example = include_str!("../../../../examples/diffusion-flux.vram");
    let models = &example[..example.find("workload ").expect("the example has workloads")];
    format!(
        "{models}workload f {{\n  runtime diffusers\n  diffusion {{\n    denoiser flux1-dev-transformer\n    \
         text_encoders t5-xxl-encoder clip-l-text\n    vae flux-vae\n    weights bf16\n    \
         architecture dit\n    hidden 3072\n    resolution {resolution}\n    text_tokens 512 tokens\n\
         {extra}  }}\n}}\ncheck f on {device}\n"
    )
}

fn pipeline_change(check: &CheckBudget) -> Option<&str> {
    check.suggestions.iter().find(|s| s.kind == SuggestionKind::Pipeline).map(|s| s.change.as_str())
}

#[test]
fn a_diffusion_pipeline_that_does_not_fit_is_told_the_cheapest_memory_option_that_does() {
    // 2048 x 2048 on an L40S: the full-resolution decode is what does not fit, and tiling it is
    // enough, so offloading (slower) is not offered.
    let over = &checks(&flux("2048 x 2048", "", "l40s"))[0];
    assert!(!over.verdict.fits());
    let suggestion = over.suggestions.iter().find(|s| s.kind == SuggestionKind::Pipeline);
    let suggestion = suggestion.expect("a pipeline option");
    assert_eq!(suggestion.change, "vae_tiling true");
    assert!(suggestion.detail.contains("fits"), "{}", suggestion.detail);
    // Written into the file, the change fits.
    let tiled = &checks(&flux("2048 x 2048", "    vae_tiling true\n", "l40s"))[0];
    assert!(tiled.verdict.fits());
    assert_eq!(pipeline_change(tiled), None, "a check that fits gets no suggestion");

    // CogVideoX on a 24 GB card: its 720 x 480 video is smaller than the default tile, so only
    // offloading whole models between phases can help, and does.
    let video = include_str!("../../../../examples/cogvideox-video.vram")
        .replace("check cogvideox on a100-sxm4-80gb", "check cogvideox on rtx-4090");
    let over = &checks(&video)[0];
    assert_eq!(pipeline_change(over), Some("offload model"));
    // The first workload's frames line is the first.
    let offloaded =
        video.replacen("    video_frames  49\n", "    video_frames  49\n    offload model\n", 1);
    assert_ne!(offloaded, video);
    assert!(checks(&offloaded)[0].verdict.fits());
}

#[test]
fn a_pipeline_already_tiled_and_offloaded_is_offered_neither_again() {
    let both = "    vae_tiling true\n    offload model\n";
    let card = "device card16 { memory 16 GiB; arch ampere; precisions fp16 bf16 }\n";
    let over = &checks(&format!("{card}{}", flux("2048 x 2048", both, "card16")))[0];
    assert!(!over.verdict.fits());
    assert_eq!(pipeline_change(over), None);
    // A language model gets none either.
    let llm = &checks(
        "workload w { model llama3.1-70b; runtime pytorch; inference { weights bf16; context 4096 tokens } }\ncheck w on l4",
    )[0];
    assert!(!llm.verdict.fits());
    assert_eq!(pipeline_change(llm), None);
}

/// `examples/sd15-on-a-laptop.vram`'s workload `name` alone, with each `(from, to)` replaced,
/// checked on a laptop card of `memory`.
fn sd15(name: &str, edits: &[(&str, &str)], memory: &str) -> String {
    let example = include_str!("../../../../examples/sd15-on-a-laptop.vram");
    let models = &example[..example.find("workload ").expect("the example has workloads")];
    let start = example.find(&format!("workload {name} ")).expect("the workload is in the example");
    let end = start + example[start..].find("\n}\n").expect("the workload's block ends") + 3;
    let mut workload = example[start..end].to_string();
    for (from, to) in edits {
        assert!(workload.contains(from), "{from:?} is not in {name}");
        workload = workload.replace(from, to);
    }
    format!(
        "{models}{workload}device card \"laptop\" {{ memory {memory} marketed; arch ampere; \
         precisions fp32 tf32 fp16 bf16 int8 }}\ncheck {name} on card\n"
    )
}

/// The pipeline's diffusion lines that say `change` (`attention sliced, vae_slicing true`).
fn written(change: &str) -> String {
    change.split(", ").fold(String::new(), |lines, option| lines + "    " + option + "\n")
}

#[test]
fn a_pipeline_is_offered_slicing_before_any_offload_and_the_fewest_options_that_fit() {
    // Four images at once: the decode is the peak, and decoding one at a time is enough.
    let over = &checks(&sd15("sd15", &[], "6 GB"))[0];
    assert!(!over.verdict.fits());
    assert_eq!(pipeline_change(over), Some("vae_slicing true"));

    // Eager attention's scores are the peak: sliced attention (half of a layer's heads at a
    // time) and the sliced decode together fit; one head at a time is not needed.
    let eager = &checks(&sd15("sd15-eager", &[], "6 GB"))[0];
    let change = pipeline_change(eager).expect("an option that fits");
    assert_eq!(change, "vae_slicing true, attention sliced");
    let lines = written(change);
    let taken = sd15("sd15-eager", &[("    attention              eager\n", &lines)], "6 GB");
    assert!(checks(&taken)[0].verdict.fits(), "{taken}");

    // At 768 x 768 half of the heads' scores are still over, one head's are not.
    let at_768 =
        [("512 x 512", "768 x 768"), ("attention_slice        max", "attention_slice auto")];
    let sliced = &checks(&sd15("sd15-sliced", &at_768, "6 GB"))[0];
    assert_eq!(pipeline_change(sliced), Some("attention_slice max"));
    let max = [("512 x 512", "768 x 768")];
    assert!(checks(&sd15("sd15-sliced", &max, "6 GB"))[0].verdict.fits());

    // On a 5 GB card nothing in place is enough: whole models take turns on the device, beside
    // the in-place options the offload still needs.
    let small = &checks(&sd15("sd15-eager", &[], "5 GB"))[0];
    let change = pipeline_change(small).expect("an offload that fits");
    assert_eq!(change, "offload model, vae_slicing true, attention sliced");
    let lines = written(change);
    let taken = sd15("sd15-eager", &[("    attention              eager\n", &lines)], "5 GB");
    assert!(checks(&taken)[0].verdict.fits(), "{taken}");
}

fn training_change(check: &CheckBudget) -> Option<&str> {
    check.suggestions.iter().find(|s| s.kind == SuggestionKind::Training).map(|s| s.change.as_str())
}

/// A Hopper card with 84 GiB free to allocate: an H100 with a little more room, so that the
/// tests below sit on the margins they are about rather than on one driver's reserve.
const ROOMY: &str = "device roomy \"84 GiB Hopper\" { memory 84 GiB; arch hopper; compute 9.0; \
                     precisions fp32 tf32 fp16 bf16 fp8 int8 }\n";

/// Llama 3.1 8B trained in pure bf16 with `extra` training lines, on `device`.
fn llama_training(extra: &str, device: &str) -> String {
    format!(
        "{ROOMY}workload t {{\n  model llama3.1-8b\n  runtime pytorch\n  training {{\n    weights bf16\n    \
         master none\n    gradients bf16\n    micro_batch 2\n    sequence 4096 tokens\n{extra}  }}\n}}\n\
         check t on {device}\n"
    )
}

#[test]
fn a_training_step_that_does_not_fit_is_told_the_fewest_levers_that_make_it_fit() {
    // On an 84 GiB card the stored activations are what does not fit: checkpointing alone is
    // enough, so 8-bit moments are not offered.
    let over = &checks(&llama_training("", "roomy"))[0];
    assert!(!over.verdict.fits());
    let suggestion = over.suggestions.iter().find(|s| s.kind == SuggestionKind::Training);
    let suggestion = suggestion.expect("a training option");
    assert_eq!(suggestion.change, "checkpointing full");
    assert!(suggestion.detail.contains("fits"), "{}", suggestion.detail);
    // Written into the file, the change fits, and nothing more is suggested.
    let checkpointed = &checks(&llama_training("    checkpointing full\n", "roomy"))[0];
    assert!(checkpointed.verdict.fits());
    assert_eq!(training_change(checkpointed), None);

    // On a 48 GB card the 16 GB of bf16 moments must shrink too, and the levers accumulate in
    // order; each taken into the file, the suggestion fits as said.
    let l40s = &checks(&llama_training("", "l40s"))[0];
    let change = training_change(l40s).expect("levers that fit a 48 GB card");
    assert!(change.starts_with("checkpointing full, optimizer adamw-8bit"), "{change}");
    let written =
        change.split(", ").fold(String::new(), |lines, lever| lines + "    " + lever + "\n");
    assert!(checks(&llama_training(&written, "l40s"))[0].verdict.fits());

    // A step in the backward pass cannot accumulate gradients: with accumulation it is skipped,
    // and the other three levers leave the card over. The moments go to the host then
    // (DeepSpeed's ZeRO-Offload), beside the levers that go with it, and 8-bit moments are moot.
    let accumulating = &checks(&llama_training("    gradient_accumulation 4\n", "l40s"))[0];
    assert!(!accumulating.verdict.fits());
    let change = training_change(accumulating).expect("the optimizer on the host");
    assert_eq!(change, "checkpointing full, loss_chunks 8, offload optimizer");
    let written =
        change.split(", ").fold(String::from("    gradient_accumulation 4\n"), |lines, lever| {
            lines + "    " + lever + "\n"
        });
    assert!(checks(&llama_training(&written, "l40s"))[0].verdict.fits());
    // Each of the three is needed: without any one the step is over.
    for dropped in change.split(", ") {
        let fewer = change
            .split(", ")
            .filter(|lever| *lever != dropped)
            .fold(String::from("    gradient_accumulation 4\n"), |lines, lever| {
                lines + "    " + lever + "\n"
            });
        assert!(!checks(&llama_training(&fewer, "l40s"))[0].verdict.fits(), "without {dropped}");
    }
}

#[test]
fn dpo_is_told_to_precompute_its_reference_first() {
    // Full DPO keeps a bf16 copy of the model as its reference (16 GB) and runs its logits over
    // both sequences of each pair: on an 84 GiB card, checkpointed and with the loss in chunks,
    // the reference is what is over, and the cheapest lever.
    let pulled = "    checkpointing full\n    loss_chunks 8\n    objective dpo\n";
    let over = &checks(&llama_training(pulled, "roomy"))[0];
    assert!(!over.verdict.fits());
    assert_eq!(training_change(over), Some("reference precomputed"));
    let written = format!("{pulled}    reference precomputed\n");
    assert!(checks(&llama_training(&written, "roomy"))[0].verdict.fits());
}

/// SD 1.5's ControlNet trained as diffusers' README's default command runs it (fp32, four
/// images of 512²) with `extra` training lines, on `device`.
fn controlnet_training(extra: &str, device: &str) -> String {
    format!(
        "model u {{ params 859_520_964 }}\nmodel te {{ params 123_060_480 }}\n\
         model ae {{ params 83_653_863 }}\nmodel c {{ params 361_279_120 }}\n\
         workload w {{\n  runtime pytorch\n  diffusion {{ denoiser u; text_encoders te; vae ae; \
         controlnet c; weights fp32; architecture unet; hidden 320; heads 8; \
         channel_mult 1 2 4 4; layers_per_block 2; cross_attention_dim 768; \
         resolution 512 x 512; batch 4 }}\n  training {{\n    method full\n    \
         zero_grad zeros\n{extra}  }}\n}}\ncheck w on {device}\n"
    )
}

#[test]
fn a_denoiser_with_eager_attention_is_told_to_fuse_it_first() {
    // Eager attention keeps every layer's probabilities (8 heads × 4096² per layer at the first
    // level, for four images): fused attention, which keeps none and costs nothing, is the one
    // lever a 24 GB card needs.
    let over = &checks(&controlnet_training("    attention eager\n", "rtx-4090"))[0];
    assert!(!over.verdict.fits());
    assert_eq!(training_change(over), Some("attention fused"));
    let fused = &checks(&controlnet_training("    attention fused\n", "rtx-4090"))[0];
    assert!(fused.verdict.fits());
    // A language model's eager attention is left alone: its levers are the others.
    let llama = &checks(&llama_training("    attention eager\n", "roomy"))[0];
    let change = training_change(llama).expect("a training option");
    assert!(!change.contains("attention"), "{change}");
}

fn share_change(check: &CheckBudget) -> Option<&str> {
    check.suggestions.iter().find(|s| s.kind == SuggestionKind::Runtime).map(|s| s.change.as_str())
}

/// The percent of a `memory_fraction N %` change.
fn percent(change: &str) -> u64 {
    change.trim_start_matches("memory_fraction ").trim_end_matches(" %").parse().expect("a percent")
}

/// Qwen2.5 7B under `runtime` with `extra` inference lines on an L40S.
fn served(runtime: &str, sessions: u64, extra: &str) -> String {
    format!(
        "workload s {{ model qwen2.5-7b; runtime {runtime}; inference {{ weights bf16; context 16384 tokens; sessions {sessions}{extra} }} }}\ncheck s on l40s"
    )
}

#[test]
fn a_serving_engine_is_told_the_largest_share_that_fits() {
    // TGI's default 95 % with its CUDA graphs on top leaves no 5 % headroom: a smaller share.
    let over = &checks(&served("tgi", 12, ""))[0];
    assert!(!over.verdict.fits());
    let change = share_change(over).expect("a share");
    assert!(percent(change) < 95, "{change}");
    // Written in, it fits, and one percent more does not.
    assert!(checks(&served("tgi", 12, &format!("; {change}")))[0].verdict.fits());
    let more = format!("; memory_fraction {} %", percent(change) + 1);
    assert!(!checks(&served("tgi", 12, &more))[0].verdict.fits());
    // Sessions beyond vLLM's 90 %: a larger share holds them, when one fits.
    let short = &checks(&served("vllm", 28, ""))[0];
    assert!(!short.verdict.fits());
    let change = share_change(short).expect("a larger share");
    assert!(percent(change) > 90, "{change}");
    assert!(checks(&served("vllm", 28, &format!("; {change}")))[0].verdict.fits());
    // A runtime that does not pool is offered none.
    let pytorch = &checks(&served("pytorch", 64, ""))[0];
    assert!(!pytorch.verdict.fits());
    assert_eq!(share_change(pytorch), None);
}
