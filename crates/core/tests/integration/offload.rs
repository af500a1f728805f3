//! Offload that moves parts of models, pinned by hand: sequential offload (diffusers
//! `enable_sequential_cpu_offload`), one module's weights on the device at a time beside its
//! phase's tensors, and group offloading (`enable_group_offload`), by blocks or by leaf modules.

use vram_core::budget::{CheckBudget, SuggestionKind};

fn evaluate(source: &str) -> Vec<CheckBudget> {
    let outcome = vram_core::evaluate(source);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks
}

fn names(check: &CheckBudget) -> Vec<String> {
    check.devices[0].components.iter().map(|c| c.name.to_string()).collect()
}

fn bytes(check: &CheckBudget, prefix: &str) -> u64 {
    let found: Vec<u64> = check.devices[0]
        .components
        .iter()
        .filter(|c| c.name.starts_with(prefix))
        .map(|c| c.bytes.0)
        .collect();
    assert_eq!(found.len(), 1, "one `{prefix}` in {:?}", names(check));
    found[0]
}

/// A pipeline whose text encoder's largest module is `te_module` parameters, with `extra`
/// settings in its diffusion block.
fn pipeline(te_module: &str, extra: &str) -> String {
    format!(
        "model dit {{ params 2 billion; largest_module 50 million }}\n\
         model te {{ params 1 billion; largest_module {te_module} }}\n\
         model ae {{ params 80 million; largest_module 2 million }}\n\
         workload w {{ runtime none; diffusion {{ denoiser dit; text_encoders te; vae ae; \
         weights bf16; architecture dit; resolution 1024 x 1024; text_tokens 256 tokens; \
         hidden 1536{extra} }} }}\ncheck w on h100-sxm-80gb"
    )
}

#[test]
fn sequential_offload_holds_one_phase_and_one_module() {
    // The denoising step (2 × (4096 + 256) tokens of 1536, 10 tensors of 2 B) and the
    // denoiser's largest module (50 M × 2 B) stay under the decode at 1024² (the last upsample's
    // 8.5 × 128 channels per pixel, 2 B) and the VAE's largest module (2 M × 2 B).
    let step: u64 = 2 * (4096 + 256) * 1536 * 10 * 2;
    let decode: u64 = 1024 * 1024 * 1088 * 2;
    assert!(step + 100_000_000 < decode + 4_000_000);
    let checks = evaluate(&pipeline("100 million", "; offload sequential"));
    let check = &checks[0];
    assert_eq!(bytes(check, "VAE decode peak"), decode);
    assert_eq!(bytes(check, "VAE weights on the device: the largest module of ae"), 4_000_000);
    assert!(names(check).iter().all(|n| !n.starts_with("denoiser") && !n.starts_with("text")));
    // No cache is emptied between modules or phases: the reserved view keeps what the
    // unoffloaded pipeline's allocator keeps beyond its live tensors.
    let resident = &evaluate(&pipeline("100 million", ""))[0];
    let cached =
        |check: &CheckBudget| bytes(check, "allocator cache") + bytes(check, "releasable cache");
    assert_eq!(cached(check), cached(resident));
    let views = &check.devices[0].views;
    assert_eq!(views.reserved.0 - views.allocated.0, cached(check));

    // A text encoder whose largest module (1 B parameters, 2 GB) outweighs the decode at 768²
    // (768² × 1,088 × 2 B, 1.28 GB): the prompt's phase is the peak, and holds that module alone.
    let checks = evaluate(&at_768(&pipeline("1 billion", "; offload sequential")));
    let held: Vec<String> = names(&checks[0])
        .into_iter()
        .filter(|n| !n.starts_with("allocator") && !n.starts_with("releasable"))
        .collect();
    let held: Vec<&str> = held.iter().map(String::as_str).filter(|n| !n.contains("CUDA")).collect();
    assert_eq!(held, ["text encoder weights on the device: the largest module of te"]);
    assert_eq!(bytes(&checks[0], "text encoder weights on the device"), 2_000_000_000);

    // Moved to the device whole first: every model's weights were resident at once.
    let checks = evaluate(&pipeline("100 million", "; offload sequential; loaded_on_device true"));
    let used: u64 = checks[0].devices[0].components.iter().map(|c| c.bytes.0).sum();
    assert_eq!(used, 2 * (2_000_000_000 + 1_000_000_000 + 80_000_000));
}

#[test]
fn an_upcast_vae_arrives_module_by_module_in_fp32() {
    let source = pipeline("100 million", "; offload sequential; vae_upcast true")
        .replace("weights bf16", "weights fp16");
    let checks = evaluate(&source);
    assert_eq!(bytes(&checks[0], "VAE weights on the device"), 2_000_000 * 4);
    assert_eq!(bytes(&checks[0], "VAE decode peak"), 1024 * 1024 * 1088 * 4);
    assert!(names(&checks[0]).iter().all(|n| !n.starts_with("VAE upcast")));
}

#[test]
fn a_model_with_a_shape_derives_its_largest_module() {
    // A text encoder declared by its shape: the token embedding (256000 × 2048) is larger than
    // any layer matrix (2048 × 5632 for the MLP).
    let source = pipeline("100 million", "; offload sequential").replace(
        "model te { params 1 billion; largest_module 100 million }",
        "model te { layers 22; hidden 2048; ffn 5632; heads 32; kv_heads 4; vocab 256000 }",
    );
    let outcome = vram_core::evaluate(&source);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    let encode = 256_000 * 2048 * 2;
    assert!(encode < 1024 * 1024 * 1088 * 2, "the decode stays the peak");
    // Without a VAE the prompt's phase is the peak: its module outweighs the denoising step.
    assert!(encode > 2 * (4096 + 256) * 1536 * 10 * 2 + 2_000_000);
    let alone = source.replace("; vae ae", "").replace(
        "model dit { params 2 billion; largest_module 50 million }",
        "model dit { params 2 billion; largest_module 1 million }",
    );
    let checks = evaluate(&alone);
    assert_eq!(bytes(&checks[0], "text encoder weights on the device"), encode);
}

#[test]
fn sequential_offload_needs_every_model_s_largest_module() {
    let source = pipeline("100 million", "; offload sequential").replace(
        "model ae { params 80 million; largest_module 2 million }",
        "model ae { params 80 million }",
    );
    let outcome = vram_core::evaluate(&source);
    let errors: Vec<_> = outcome.diagnostics.iter().filter(|d| d.is_error()).collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].code, "E011");
    assert!(errors[0].message.contains("`ae`"), "{}", errors[0].message);
    // `offload model` needs no module sizes.
    evaluate(&source.replace("offload sequential", "offload model"));
}

#[test]
fn a_pipeline_too_large_to_offload_by_model_is_told_sequential_offload() {
    let example = include_str!("../../../../examples/diffusion-flux.vram");
    let models = &example[..example.find("workload ").expect("the example has workloads")];
    let start = example.find("workload flux \"").expect("the resident workload");
    let flux = &example[start..start + example[start..].find("\n}\n").expect("its end") + 3];
    let start = example.find("device laptop-8gb").expect("the laptop card");
    let laptop = &example[start..start + example[start..].find("\n}\n").expect("its end") + 3];
    let laptop = format!("{models}{flux}{laptop}check flux on laptop-8gb\n");
    let checks = evaluate(&laptop);
    let over = checks.iter().find(|c| c.id == "flux on laptop-8gb").expect("the check");
    assert!(!over.verdict.fits());
    let change = over.suggestions.iter().find(|s| s.kind == SuggestionKind::Pipeline);
    // FLUX's transformer alone (22 GiB) does not fit 8 GB, so whole-model offload cannot help.
    assert_eq!(change.map(|s| s.change.as_str()), Some("offload sequential"));
    // Without the module sizes, sequential offload is not offered.
    let without_sizes = laptop
        .replace("  largest_module 2_359_808  # a 512-channel 3 x 3 convolution with bias\n", "");
    assert_ne!(without_sizes, laptop);
    let checks = evaluate(&without_sizes);
    let over = checks.iter().find(|c| c.id == "flux on laptop-8gb").expect("the check");
    assert!(over.suggestions.iter().all(|s| s.kind != SuggestionKind::Pipeline));
}

#[test]
fn buffers_stay_on_the_device_through_every_phase() {
    // A position table of 10 M values registered as a buffer: accelerate leaves buffers on the
    // device, so the decode's phase holds it beside the decoder's tensors.
    let source = pipeline("100 million", "; offload sequential").replace(
        "model dit { params 2 billion; largest_module 50 million }",
        "model dit { params 2 billion; largest_module 50 million; buffers 10 million }",
    );
    let checks = evaluate(&source);
    assert_eq!(bytes(&checks[0], "denoiser buffers on the device: dit"), 20_000_000);
    assert_eq!(bytes(&checks[0], "VAE decode peak"), 1024 * 1024 * 1088 * 2);
    // Without sequential offload the buffer is part of the resident weights, not said apart.
    let resident = evaluate(&source.replace("; offload sequential", ""));
    assert!(names(&resident[0]).iter().all(|n| !n.contains("buffers")));
}

/// The pipeline generating 768 × 768 images, whose decode (768² × 1,088 × 2 B, 1.28 GB) stays
/// under a 1 B-parameter text encoder's 2 GB.
fn at_768(source: &str) -> String {
    source.replace("resolution 1024 x 1024", "resolution 768 x 768")
}

/// The pipeline at 768² with the denoiser cut into blocks: 28 blocks of 60 M parameters and
/// 320 M outside them (2 B parameters in all), and a text encoder without block lists.
fn blocked(extra: &str) -> String {
    at_768(&pipeline("100 million", extra)).replace(
        "model dit { params 2 billion; largest_module 50 million }",
        "model dit { params 2 billion; largest_module 50 million; largest_block 60 million; outside_blocks 320 million }",
    )
}

#[test]
fn block_level_group_offload_holds_a_group_and_the_rest_of_its_model() {
    let step: u64 = 2 * (2304 + 256) * 1536 * 10 * 2;
    let decode: u64 = 768 * 768 * 1088 * 2;
    // One block per group: the denoising step holds 60 M + 320 M parameters at 2 B beside its
    // tensors; the text encoder, without block lists, is one group of 1 B parameters (2 GB),
    // the largest phase.
    let checks = evaluate(&blocked("; offload blocks"));
    let check = &checks[0];
    assert_eq!(bytes(check, "text encoder weights: te"), 2_000_000_000);
    assert!(names(check).iter().all(|n| !n.starts_with("denoiser")));
    // Without the text encoder the decode is the peak, with the whole VAE (80 M × 2 B).
    let checks = evaluate(&blocked("; offload blocks").replace("text_encoders te; ", ""));
    let check = &checks[0];
    assert!(decode + 160_000_000 > step + 760_000_000);
    assert_eq!(bytes(check, "VAE decode peak"), decode);
    assert_eq!(bytes(check, "VAE weights: ae"), 160_000_000);
    // Eight blocks per group: 8 × 60 M + 320 M parameters, 1.6 GB, beside the step, now above
    // the decode.
    let checks = evaluate(
        &blocked("; offload blocks; blocks_per_group 8").replace("text_encoders te; ", ""),
    );
    let check = &checks[0];
    assert!(step + 1_600_000_000 > decode + 160_000_000);
    assert_eq!(
        bytes(check, "denoiser weights on the device: block groups of dit"),
        8 * 60_000_000 * 2
    );
    assert_eq!(bytes(check, "denoiser weights on the device: the rest of dit"), 320_000_000 * 2);
    // A stream prefetches the next group: two groups of one block.
    let checks = evaluate(
        &blocked("; offload blocks; offload_stream true; blocks_per_group 4")
            .replace("text_encoders te; ", "")
            .replace("; vae ae", ""),
    );
    assert_eq!(
        bytes(&checks[0], "denoiser weights on the device: block groups"),
        2 * 60_000_000 * 2
    );
}

#[test]
fn leaf_level_group_offload_is_sequential_offload_with_a_prefetched_module() {
    let sequential = evaluate(&at_768(&pipeline("1 billion", "; offload sequential")));
    let leaves = evaluate(&at_768(&pipeline("1 billion", "; offload leaves")));
    let module = "text encoder weights on the device: the largest module of te";
    assert_eq!(bytes(&leaves[0], module), bytes(&sequential[0], module));
    let streamed =
        evaluate(&at_768(&pipeline("1 billion", "; offload leaves; offload_stream true")));
    assert_eq!(bytes(&streamed[0], module), 2 * 1_000_000_000 * 2);
    // Leaf modules need their sizes, as sequential offload does.
    let without_sizes = pipeline("100 million", "; offload leaves").replace(
        "model ae { params 80 million; largest_module 2 million }",
        "model ae { params 80 million }",
    );
    let outcome = vram_core::evaluate(&without_sizes);
    let codes: Vec<_> =
        outcome.diagnostics.iter().filter(|d| d.is_error()).map(|d| d.code.to_string()).collect();
    assert_eq!(codes, ["E011"]);
}

#[test]
fn group_offload_settings_say_when_they_do_nothing() {
    let outcome = vram_core::evaluate(&blocked("; blocks_per_group 2"));
    let codes: Vec<_> = outcome.diagnostics.iter().map(|d| d.code.to_string()).collect();
    assert_eq!(codes, ["W005"]);
    let outcome =
        vram_core::evaluate(&blocked("; offload blocks; offload_stream true; blocks_per_group 2"));
    let codes: Vec<_> = outcome.diagnostics.iter().map(|d| d.code.to_string()).collect();
    assert_eq!(codes, ["W005"]);
    // A block size needs the size of what lies outside the blocks.
    let outcome = vram_core::evaluate(
        &blocked("; offload blocks").replace("; outside_blocks 320 million", ""),
    );
    let codes: Vec<_> =
        outcome.diagnostics.iter().filter(|d| d.is_error()).map(|d| d.code.to_string()).collect();
    assert_eq!(codes, ["E011"]);
}

#[test]
fn an_offloading_pipeline_keeps_its_weights_on_the_host() {
    let on_machine = |extra: &str| {
        let source = pipeline("100 million", extra).replace(
            "check w on h100-sxm-80gb",
            "machine box { gpus 1 x h100-sxm-80gb; host_ram 64 GiB; disk 1 TB }\ncheck w on box",
        );
        let outcome = vram_core::evaluate(&source);
        assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
        outcome.budget.checks.into_iter().next().expect("one check")
    };
    // Every model's bf16 weights: 2 B + 1 B + 80 M parameters.
    let all = 2 * (2_000_000_000 + 1_000_000_000 + 80_000_000);
    let sequential = on_machine("; offload sequential");
    let host = sequential.host.as_ref().expect("a machine has host lines");
    let held = host.ram.components.iter().find(|c| c.name.contains("held on the host"));
    assert_eq!(held.map(|c| c.bytes.0), Some(all));
    // The files hold every weight, whatever part the device holds.
    assert_eq!(host.disk.required.0, all);
    // Resident, the pipeline holds nothing on the host beyond the staged copy.
    let resident = on_machine("");
    let host = resident.host.as_ref().expect("a machine has host lines");
    assert!(host.ram.components.iter().all(|c| !c.name.contains("held on the host")));
    assert_eq!(host.disk.required.0, all);
}

#[test]
fn a_denoiser_cut_into_blocks_is_told_block_offload_before_sequential() {
    // A 4.5 GiB card: model offload holds the whole 4 GB denoiser; block offload holds one
    // block and the rest (760 MB), and the 2 GB text encoder whole.
    let device = "device small { memory 4608 MiB; arch ada; compute 8.9; precisions fp32 fp16 bf16; vendor nvidia }\n";
    let source =
        format!("{device}{}", blocked("")).replace("check w on h100-sxm-80gb", "check w on small");
    let checks = evaluate(&source);
    assert!(!checks[0].verdict.fits());
    let change = checks[0].suggestions.iter().find(|s| s.kind == SuggestionKind::Pipeline);
    assert_eq!(change.map(|s| s.change.as_str()), Some("offload blocks"));
    // Without the block sizes, sequential offload is the answer.
    let unblocked = source.replace("; largest_block 60 million; outside_blocks 320 million", "");
    let checks = evaluate(&unblocked);
    let change = checks[0].suggestions.iter().find(|s| s.kind == SuggestionKind::Pipeline);
    assert_eq!(change.map(|s| s.change.as_str()), Some("offload sequential"));
}

#[test]
fn the_safety_checker_stays_on_the_device_under_every_offload() {
    // StableDiffusionSafetyChecker: CLIP ViT-L/14's vision tower and its projection (303,981,588
    // parameters), loaded in the pipeline's type; diffusers excludes it from CPU offload.
    let checker = "model checker { params 303_981_588; largest_module 4_198_400 }\n";
    for offload in ["", "; offload model", "; offload sequential"] {
        let source = format!(
            "{checker}{}",
            pipeline("10 million", &format!("; safety_checker checker{offload}"))
        );
        let checks = evaluate(&source);
        assert_eq!(bytes(&checks[0], "safety checker weights"), 303_981_588 * 2, "{offload}");
        let without = evaluate(&pipeline("10 million", offload));
        assert_eq!(
            checks[0].devices[0].views.allocated.0 - without[0].devices[0].views.allocated.0,
            303_981_588 * 2,
            "{offload}: the checker adds its weights to the peak and nothing else"
        );
    }
}
