//! Formulas pinned against values computed by hand (DOMAIN.md §2-5) and published counts.

use vram_core::budget::{BandBasis, CheckBudget, Verdict};

fn evaluate(source: &str) -> Vec<CheckBudget> {
    let outcome = vram_core::evaluate(source);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks
}

/// Bytes of every component whose name starts with `prefix` on device `device` of `check`.
fn bytes(check: &CheckBudget, device: usize, prefix: &str) -> u64 {
    let found: Vec<u64> = check.devices[device]
        .components
        .iter()
        .filter(|c| c.name.starts_with(prefix))
        .map(|c| c.bytes.0)
        .collect();
    assert!(
        !found.is_empty(),
        "no component named {prefix:?} in {:#?}",
        check.devices[device].components
    );
    found.iter().sum()
}

/// What the caching allocator holds beyond live tensors on device `device` of `check`: the
/// cache a device without room still needs and the releasable rest.
fn cached(check: &CheckBudget, device: usize) -> u64 {
    use vram_core::budget::HeldBy;
    check.devices[device]
        .components
        .iter()
        .filter(|c| matches!(c.held_by, HeldBy::AllocatorCache | HeldBy::ReleasableCache))
        .map(|c| c.bytes.0)
        .sum()
}

fn shape(name: &str) -> vram_core::hir::Shape {
    vram_core::catalog::builtin().models[name].shape.clone().expect("catalog model has a shape")
}

#[test]
fn parameter_counts_match_published_values() {
    assert_eq!(vram_core::eval::parameter_count(&shape("llama3.1-8b")), Some(8_030_261_248));
    assert_eq!(vram_core::eval::parameter_count(&shape("llama3.1-70b")), Some(70_553_706_496));
    // Qwen2.5 7B has q/k/v biases; 7.62 billion as published (7,615,616,512).
    assert_eq!(vram_core::eval::parameter_count(&shape("qwen2.5-7b")), Some(7_615_616_512));
}

const LLAMA_8B_CHAT: &str = "
workload w {
  model llama3.1-8b
  runtime none
  inference {
    weights bf16
    context 8192 tokens
    sessions 16
  }
}
check w on h100-sxm-80gb
check w on 2 x h100-sxm-80gb split tensor 2
check w on 16 x h100-sxm-80gb split tensor 16
";

#[test]
fn llama_8b_bf16_weights_are_two_bytes_per_parameter() {
    let checks = evaluate(LLAMA_8B_CHAT);
    assert_eq!(bytes(&checks[0], 0, "weights"), 8_030_261_248 * 2);
}

#[test]
fn kv_cache_is_128_kib_per_token_and_halves_under_tensor_parallel() {
    let checks = evaluate(LLAMA_8B_CHAT);
    // 2 × 32 layers × 8 kv heads × 128 head_dim × 2 B = 131,072 B per token.
    assert_eq!(bytes(&checks[0], 0, "KV cache"), 131_072 * 8192 * 16);
    assert_eq!(bytes(&checks[1], 0, "KV cache"), 131_072 * 8192 * 16 / 2);
    assert_eq!(bytes(&checks[1], 1, "KV cache"), 131_072 * 8192 * 16 / 2);
    // 16 ranks share 8 kv heads: each keeps one head, replicated (vLLM get_num_kv_heads).
    assert_eq!(bytes(&checks[2], 0, "KV cache"), 131_072 * 8192 * 16 / 8);
}

#[test]
fn old_transformers_rotary_tables_are_per_layer_and_per_position() {
    let source = |runtime: &str, extra: &str| {
        format!(
            "workload w {{ model qwen2.5-1.5b; runtime {runtime}; inference {{ weights bf16; \
             context 2049 tokens; prefill_chunk 1 tokens{extra} }} }}\ncheck w on a100-sxm4-80gb"
        )
    };
    // Qwen2 1.5B under transformers 4.38: 28 layers × cos and sin × 32,768 positions × 128
    // head_dim × 2 B (bf16) = 448 MiB, beside the weights.
    let then = evaluate(&source("pytorch", "; rope_tables 32768 tokens"));
    assert_eq!(bytes(&then[0], 0, "rotary tables"), 28 * 2 * 32_768 * 128 * 2);
    let now = evaluate(&source("pytorch", ""));
    assert!(now[0].devices[0].components.iter().all(|c| !c.name.starts_with("rotary")));
    assert_eq!(
        then[0].devices[0].views.allocated.0 - now[0].devices[0].views.allocated.0,
        448 * 1024 * 1024
    );
    // A serving engine builds its own table once: the setting says it does nothing there.
    let outcome = vram_core::evaluate(&source("vllm", "; rope_tables 32768 tokens"));
    let warnings: Vec<_> = outcome.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(warnings, ["W005"], "{:?}", outcome.diagnostics);
    let served = &outcome.budget.checks[0].devices[0].components;
    assert!(served.iter().all(|c| !c.name.starts_with("rotary")));
    // Training loads the tables in the weights' own type: fp32 weights, 4 B a value (Llama 3.1
    // 8B: 32 layers × 2 × 8,192 positions × 128 head_dim); a 4-bit load, the activations' type.
    let trained = |weights: &str| {
        let source = format!(
            "workload w {{ model llama3.1-8b; runtime pytorch; training {{ method lora {{ rank 8 }}; weights {weights}; \
             sequence 512 tokens; rope_tables 8192 tokens }} }}\ncheck w on h200-sxm"
        );
        bytes(&evaluate(&source)[0], 0, "rotary tables")
    };
    assert_eq!(trained("fp32"), 32 * 2 * 8192 * 128 * 4);
    assert_eq!(trained("nf4"), 32 * 2 * 8192 * 128 * 2);
}

#[test]
fn a_checkpointed_lora_step_leaves_segments_reserved_beyond_its_tensors() {
    let source = |device: &str, extra: &str| {
        format!(
            "workload w {{ model mistral-7b; runtime pytorch; training {{ method lora {{ rank 16; \
             targets q k v o; dropout 0.1 }}; weights bf16; micro_batch 4; sequence 4096 tokens; \
             checkpointing full{extra} }} }}\ncheck w on {device}"
        )
    };
    let checks = evaluate(&source("a100-sxm4-80gb", ""));
    let device = &checks[0].devices[0];
    let cache = cached(&checks[0], 0);
    assert_eq!(device.views.reserved.0, device.views.allocated.0 + cache);
    // fms-hf-tuning's benchmark of this step (Mistral 7B, LoRA r=16 on q k v o, 4 × 4,096 packed
    // tokens, FlashAttention-2, gradient checkpointing; one A100 80GB) reads 29,576 MiB from the
    // driver beside a 24.87 GiB allocated peak: 3.5 GiB above the tensors and a 0.5 GiB context.
    // The replay, not fitted to it, lands within 5 % of the driver's reading; without it the
    // device view is 14 % short.
    let measured: u64 = 29_576 * 1024 * 1024;
    let device_view = device.views.device.0;
    assert!(device_view.abs_diff(measured) * 20 < measured, "{device_view} vs {measured}");
    assert!((device_view - cache) * 10 < measured * 9);
    // The cache a device without room still needs is what the pressed replay reserves; the rest
    // goes back to the driver before PyTorch reports out of memory, so `required` leaves it out.
    assert_eq!(
        device.releasable.0 + bytes(&checks[0], 0, "allocator cache (training step)"),
        cache
    );
    assert!(device.releasable.0 > 0);
    // ZeRO-2 partitions adapter gradients and optimizer state, small-pool tensors, and leaves the
    // step's activations and their segments as they are: the same replayed cache.
    let zero2 = evaluate(&source("a100-sxm4-80gb", "; sharding zero2"));
    assert_eq!(cached(&zero2[0], 0), cache);
    // ZeRO-3 on one rank gathers nothing, a parameter being its own partition: the same too.
    let zero3 = evaluate(&source("a100-sxm4-80gb", "; sharding zero3"));
    assert_eq!(cached(&zero3[0], 0), cache);
    // Steps the replay does not cover state no reserve: one whose weights are gathered a layer
    // at a time between the step's tensors (ZeRO-3 over two ranks), an eager attention's.
    for (devices, other) in [
        ("2 x a100-sxm4-80gb split data 2", "; sharding zero3"),
        ("a100-sxm4-80gb", "; attention eager"),
    ] {
        let checks = evaluate(&source(devices, other));
        assert_eq!(cached(&checks[0], 0), 0, "{other}");
    }
}

#[test]
fn a_step_trained_in_full_leaves_its_parameters_segments_reserved() {
    let with = |precision: &str, extra: &str, devices: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime pytorch; training {{ method full; \
             weights bf16; {precision}; micro_batch 2; sequence 8192 tokens; \
             checkpointing full{extra} }} }}\ncheck w on {devices}"
        )
    };
    let source = |extra: &str| with("master none; gradients bf16", extra, "h200-sxm");
    // Pure bf16: AdamW makes its moments at the first step out of what the activations and the
    // loss left cached, and the next step's loss finds no block left whole for it.
    let fp32_loss = evaluate(&source(""));
    let device = &fp32_loss[0].devices[0];
    let cache = cached(&fp32_loss[0], 0);
    assert!(cache > 0);
    assert_eq!(device.views.reserved.0, device.views.allocated.0 + cache);
    // A cross-entropy on the 16-bit logits (a loop's own, on transformers' logits from 4.46)
    // makes the step's largest tensors half as large, and the cache shrinks with them; the
    // allocated peak, the optimizer step's, stays.
    let bf16_loss = evaluate(&source("; loss bf16"));
    assert!(cached(&bf16_loss[0], 0) < cache);
    assert_eq!(bf16_loss[0].devices[0].views.allocated, device.views.allocated);
    // Gradients accumulated over micro-batches are held through them: a different replay.
    let accumulated = evaluate(&source("; gradient_accumulation 4"));
    assert_ne!(cached(&accumulated[0], 0), cache);
    // fp32 parameters under a bf16 autocast: each matrix's bf16 copy is made in the forward
    // pass and, checkpointed, freed when it returns, then made again as each layer is
    // recomputed: replayed too.
    let autocast =
        evaluate(&with("activations bf16", "", "h200-sxm").replace("weights bf16", "weights fp32"));
    assert!(cached(&autocast[0], 0) > 0);
    // DeepSpeed ZeRO-3 on one rank: its flat buffers made before training (the fp32 masters
    // cast from 16-bit clones, the moments made beside a gradient buffer the size of the
    // largest sub-group) and its step's fp64 norms and fp32 gradients leave segments cached
    // beyond what the step holds at its peak.
    let zero3 = with("gradients bf16", "; sharding zero3", "h200-sxm");
    let zero3 = evaluate(&zero3.replace("llama3.1-8b", "llama3.2-3b"));
    let device = &zero3[0].devices[0];
    assert!(zero3[0].verdict.fits());
    assert!(cached(&zero3[0], 0) > 0);
    assert_eq!(device.views.reserved.0, device.views.allocated.0 + cached(&zero3[0], 0));
    // Steps the replay does not cover state no reserve: 16-bit weights beside an fp32 master
    // copy without DeepSpeed, 8-bit AdamW, ZeRO-2's partitions, ZeRO-3 over two ranks.
    let pure = "master none; gradients bf16";
    for (precision, other) in [
        ("master fp32; gradients fp32", ""),
        (pure, "; optimizer adamw-8bit"),
        (pure, "; sharding zero2"),
        ("gradients bf16", "; sharding zero3"),
    ] {
        let checks = evaluate(&with(precision, other, "2 x h200-sxm split data 2"));
        assert_eq!(cached(&checks[0], 0), 0, "{precision}{other}");
    }
}

#[test]
fn an_encoder_step_is_replayed_with_its_eager_attention() {
    let source = |attention: &str| {
        format!(
            "model enc \"a BERT-Large-shaped encoder\" {{ layers 24; hidden 1024; ffn 4096; \
             heads 16; kv_heads 16; vocab 30522; mlp plain; biases true; norm layernorm; \
             positions 512; output none; dropout true }}\n\
             workload w {{ model enc; runtime pytorch; training {{ method full; weights fp32; \
             optimizer adamw; micro_batch 1; sequence 512 tokens; checkpointing none; \
             gradient_accumulation 4; attention {attention} }} }}\ncheck w on v100-sxm2-16gb"
        )
    };
    // Its moments, made at the first step out of the cached activations, leave what they do
    // not fill of those segments cached when the next step makes its activations again.
    let eager = evaluate(&source("eager"));
    assert!(cached(&eager[0], 0) > 0);
    let device = &eager[0].devices[0];
    assert_eq!(device.views.reserved.0, device.views.allocated.0 + cached(&eager[0], 0));
    // A fused attention in an encoder is not a step the replay covers.
    assert_eq!(cached(&evaluate(&source("fused"))[0], 0), 0);
}

#[test]
fn a_sequential_pipeline_holds_one_micro_batch_and_no_process_group() {
    let source = |schedule: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime pytorch; training {{ method lora {{ rank 8 }}; \
             weights bf16; micro_batch 1; sequence 2048 tokens; checkpointing none{schedule} }} }}\n\
             check w on 2 x a100-sxm4-80gb split pipeline 2"
        )
    };
    let interleaved = evaluate(&source(""));
    let sequential = evaluate(&source("; pipeline_schedule sequential"));
    // Under 1F1B the first of two stages holds two micro-batches' activations; run one at a
    // time (accelerate's device_map), one. The last stage holds one either way.
    let first = |checks: &[vram_core::budget::CheckBudget]| bytes(&checks[0], 0, "activations");
    assert_eq!(first(&interleaved), 2 * first(&sequential));
    assert_eq!(bytes(&interleaved[0], 1, "activations"), bytes(&sequential[0], 1, "activations"));
    // One process copies activations between its GPUs: no NCCL buffers.
    let nccl = |checks: &[vram_core::budget::CheckBudget]| {
        checks[0].devices[0].components.iter().any(|c| c.name == "NCCL buffers")
    };
    assert!(nccl(&interleaved));
    assert!(!nccl(&sequential));
    // Without a pipeline split the setting does nothing, and says so.
    let alone = vram_core::evaluate(
        "workload w { model llama3.1-8b; runtime pytorch; training { method lora { rank 8 }; \
         weights bf16; sequence 2048 tokens; pipeline_schedule sequential } }\ncheck w on h100-sxm-80gb",
    );
    let codes: Vec<String> = alone.diagnostics.iter().map(|d| d.code.to_string()).collect();
    assert_eq!(codes, ["W005"]);
    // Inference split over GPUs under PyTorch is accelerate's device_map too.
    let served = evaluate(
        "workload w { model llama3.1-8b; runtime pytorch; inference { weights bf16; \
         context 4096 tokens } }\ncheck w on 2 x a100-sxm4-80gb split pipeline 2",
    );
    assert!(served[0].devices[0].components.iter().all(|c| c.name != "NCCL buffers"));
}

#[test]
fn the_reserved_view_stops_where_the_device_is_full() {
    // A step whose whole replayed cache does not fit beside its tensors on a 48 GB card: the
    // allocator gives its unused segments back before it fails, so the reserved view is the
    // device's room less the context, never more, and never less than the cache it still needs.
    let source = "workload w { model mistral-7b; runtime pytorch; training { method lora { rank 16; \
                  targets q k v o }; weights bf16; micro_batch 9; sequence 4096 tokens; \
                  checkpointing full } }\ncheck w on l40s";
    let checks = evaluate(source);
    let device = &checks[0].devices[0];
    let outside = device.views.device.0 - device.views.reserved.0;
    let room = device.capacity.usable.0 - outside;
    assert!(device.views.allocated.0 + cached(&checks[0], 0) > room);
    assert_eq!(device.views.reserved.0, room);
    assert!(device.views.reserved.0 >= device.used.0 - device.releasable.0 - outside);
}

#[test]
fn an_encoder_without_a_vocabulary_output_caches_nothing() {
    // BERT-large's shape (one-card-three-workloads.vram): 24 layers of 1024, 16 heads.
    let model = |output: &str| {
        format!(
            "model enc {{ layers 24; hidden 1024; ffn 4096; heads 16; vocab 30522; mlp plain; \
             biases true; norm layernorm; positions 512; output {output} }}\n\
             workload w {{ model enc; runtime pytorch; inference {{ weights fp16; \
             context 512 tokens; sessions 32 }} }}\ncheck w on l4\n"
        )
    };
    let encoder = &evaluate(&model("none"))[0];
    let names: Vec<String> =
        encoder.devices[0].components.iter().map(|c| c.name.to_string()).collect();
    assert!(names.iter().all(|n| !n.starts_with("KV cache")), "{names:?}");
    // With a language-model head it generates, and its cache is 2 × 24 layers × 1024 × 2 B per
    // token, for 512 tokens of 32 sessions.
    let decoder = &evaluate(&model("lm"))[0];
    let cache = decoder.devices[0].components.iter().find(|c| c.name == "KV cache");
    assert_eq!(cache.map(|c| c.bytes.0), Some(2 * 24 * 1024 * 2 * 512 * 32));
}

#[test]
fn tensor_parallel_never_pools_and_never_loses_weights() {
    let checks = evaluate(LLAMA_8B_CHAT);
    let single = bytes(&checks[0], 0, "weights");
    let shard = bytes(&checks[1], 0, "weights");
    assert_eq!(checks[1].devices.len(), 2);
    assert!(shard * 2 >= single, "two shards hold at least the whole model");
    assert!(shard < single, "each shard holds less than the whole model");
}

#[test]
fn quantized_weights_keep_embeddings_and_norms_at_16_bit() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime none; inference { weights int4; context 1024 tokens } }\ncheck w on l4",
    );
    // The 32 layers' matrices at 0.5 B; embedding and head at fp16 (2 B).
    assert_eq!(bytes(&checks[0], 0, "weights: layer matrices"), 32 * 218_103_808 / 2);
    assert_eq!(bytes(&checks[0], 0, "weights: embedding"), 128_256 * 4096 * 2);
    assert_eq!(bytes(&checks[0], 0, "weights: output head"), 128_256 * 4096 * 2);
}

#[test]
fn full_fine_tune_keeps_eighteen_bytes_per_parameter() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime none; training { weights bf16; sequence 1024 tokens; zero_grad zeros } }\ncheck w on h200-sxm",
    );
    let p = 8_030_261_248u64;
    assert_eq!(bytes(&checks[0], 0, "weights"), 2 * p);
    assert_eq!(bytes(&checks[0], 0, "master weights"), 4 * p);
    assert_eq!(bytes(&checks[0], 0, "gradients"), 4 * p);
    assert_eq!(bytes(&checks[0], 0, "optimizer state"), 8 * p);
}

#[test]
fn lora_rank_16_on_all_linear_layers_of_llama_8b() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime none; training { method lora { rank 16; targets all }; weights bf16; sequence 1024 tokens } }\ncheck w on a100-sxm4-80gb",
    );
    // PEFT reports 41,943,040 trainable parameters for this configuration; adapters in fp32.
    assert_eq!(bytes(&checks[0], 0, "LoRA adapters"), 41_943_040 * 4);
    assert_eq!(bytes(&checks[0], 0, "adapter optimizer state"), 41_943_040 * 8);
    assert_eq!(bytes(&checks[0], 0, "frozen base weights"), 8_030_261_248 * 2);
}

#[test]
fn full_sharding_divides_the_adapters_too() {
    let source = |sharding: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ method lora {{ rank 16; targets all }}; weights bf16; sequence 1024 tokens; sharding {sharding} }} }}\ncheck w on 4 x a100-sxm4-80gb split data 4"
        )
    };
    // ZeRO-3 / FSDP FULL_SHARD partition every parameter: each rank keeps a quarter of the
    // 41,943,040 fp32 adapter parameters, as it does of their optimizer state.
    let full = evaluate(&source("zero3"));
    assert_eq!(bytes(&full[0], 0, "LoRA adapters"), 41_943_040 * 4 / 4);
    assert_eq!(bytes(&full[0], 0, "adapter optimizer state"), 41_943_040 * 8 / 4);
    // ZeRO-2 keeps whole parameters on every rank.
    let states = evaluate(&source("zero2"));
    assert_eq!(bytes(&states[0], 0, "LoRA adapters"), 41_943_040 * 4);
}

#[test]
fn lora_adapters_keep_their_dropout_masks_and_inputs() {
    let source = |method: &str, checkpointing: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ method lora {{ rank 16; targets q v o down{method} }}; weights bf16; sequence 1024 tokens; checkpointing {checkpointing} }} }}\ncheck w on h200-sxm"
        )
    };
    // Inputs of the adapted matrices per token: q, v and o 4,096 each, down 14,336; lora_A's
    // rank-16 outputs, kept by lora_B, 4 × 16 bf16 elements.
    let inputs = 3 * 4096 + 14_336;
    let ranks = 4 * 16 * 2;
    let kept = |checks: &[CheckBudget]| bytes(&checks[0], 0, "LoRA saved inputs");
    // Dropout: a 1 B mask and the bf16 dropout output lora_A keeps, over every layer.
    let dropout = evaluate(&source("; dropout 0.05", "none"));
    assert_eq!(kept(&dropout), 32 * 1024 * (inputs * 3 + ranks));
    // No dropout, fp32 adapters on a bf16 stream: `x.to(fp32)` copies, autocast copies back to
    // bf16 for lora_A, which keeps that copy.
    assert_eq!(kept(&evaluate(&source("", "none"))), 32 * 1024 * (inputs * 2 + ranks));
    // bf16 adapters on a bf16 stream: lora_A keeps the base layer's own input.
    assert_eq!(kept(&evaluate(&source("; dtype bf16", "none"))), 32 * 1024 * ranks);
    // Full checkpointing: only the recomputed layer's.
    assert_eq!(kept(&evaluate(&source("; dropout 0.1", "full"))), 1024 * (inputs * 3 + ranks));
    // q and v on one fused projection drop out their shared 4,096-wide input once.
    let fused = evaluate(&source("; dropout 0.05; fused_qkv true", "none"));
    assert_eq!(kept(&fused), 32 * 1024 * ((inputs - 4096) * 3 + ranks));
    // The attention keeps the value as a view of the fused output, whose query and key parts
    // (32 + 8 heads of 128) stay alive with it in every layer.
    let separate = evaluate(&source("; dropout 0.05", "none"));
    let stored = |checks: &[CheckBudget]| bytes(&checks[0], 0, "activations");
    assert_eq!(stored(&fused) - stored(&separate), 32 * 1024 * (32 + 8) * 128 * 2);
    // Two pipeline stages of 16 layers: the first keeps two micro-batches in flight (1F1B).
    let staged = source("; dropout 0.05", "none")
        .replace("check w on h200-sxm", "check w on 2 x h200-sxm split pipeline 2");
    let staged = evaluate(&staged);
    assert_eq!(bytes(&staged[0], 0, "LoRA saved inputs"), 16 * 2 * 1024 * (inputs * 3 + ranks));
    assert_eq!(bytes(&staged[0], 1, "LoRA saved inputs"), 16 * 1024 * (inputs * 3 + ranks));
    // While the first stage's last layer runs its MLP's output projection it holds the residual,
    // the projection's output, the MLP's input and product (no frozen projection keeps them),
    // and PEFT's fp32 copy of the product and its dropout's output: no loss on that stage to
    // set them against.
    let transient = (3 * 4096 + 14_336) * 2 + 2 * 4 * 14_336;
    assert_eq!(bytes(&staged[0], 0, "last layer's forward transients"), 1024 * transient);
}

#[test]
fn checkpointing_keeps_layer_inputs_plus_one_layer() {
    let source = |checkpointing: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ weights bf16; micro_batch 2; sequence 1024 tokens; checkpointing {checkpointing} }} }}\ncheck w on h200-sxm"
        )
    };
    let none = bytes(&evaluate(&source("none"))[0], 0, "activations");
    let full = bytes(&evaluate(&source("full"))[0], 0, "activations");
    let inputs = 32 * 1024 * 2 * 4096 * 2;
    // One layer: (4·4096 + (2·32 + 2·8)·128 + 4·14336 + 4·32/2 fp32 stats) elements × 2 B per
    // token, and each of the two eager RMSNorms' fp32 copy of its input (2 B beyond the input
    // counted in bf16) and normalized bf16 tensor (kept for the trained weight): 4·4096 more.
    let per_layer = 1024 * 2 * (4 * 4096 + 80 * 128 + 4 * 14336 + 64 + 4 * 4096) * 2;
    assert_eq!(none, 32 * per_layer);
    // The recomputed layer's forward pass also holds, while its MLP's output projection runs,
    // the residual and that projection's output, and the gradient arriving for the layer: 3h.
    let transient = 1024 * 2 * 3 * 4096 * 2;
    assert_eq!(full, inputs + per_layer + transient);
    // The loss and the recomputed layer never meet: the loss's 12 B per logit are freed before
    // the last layer is recomputed, so under full checkpointing it counts only what it exceeds
    // that layer by; with every layer stored, all of it.
    let loss = 2 * 1024 * 128_256 * 12;
    assert_eq!(bytes(&evaluate(&source("none"))[0], 0, "logits and loss"), loss);
    assert_eq!(
        bytes(&evaluate(&source("full"))[0], 0, "logits and loss"),
        loss - per_layer - transient
    );
    // A head smaller than one layer adds nothing beyond it.
    let small = source("full").replace("model llama3.1-8b;", "model tiny; ");
    let small = format!(
        "model tiny {{ layers 32; hidden 4096; ffn 14336; heads 32; kv_heads 8; vocab 1000 }}\n{small}"
    );
    assert_eq!(bytes(&evaluate(&small)[0], 0, "logits and loss"), 0);
    assert_eq!(bytes(&evaluate(&small)[0], 0, "activations"), full);
}

#[test]
fn op_level_checkpointing_keeps_every_other_product_and_the_attention_output() {
    let source = |checkpointing: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ weights bf16; micro_batch 2; sequence 1024 tokens; checkpointing {checkpointing} }} }}\ncheck w on h200-sxm"
        )
    };
    // torchtitan's op-level policy saves, per token of each layer: its input (4096), the
    // attention output (4096) with an fp32 log-sum-exp per head (32 · 4 B = 64 bf16 elements),
    // and the 1st, 3rd, 5th and 7th products: q (4096), v (1024), gate (14336), down (4096).
    let saved = 32 * 1024 * 2 * (4096 + 4096 + 64 + 4096 + 1024 + 14336 + 4096) * 2;
    let per_layer = 1024 * 2 * (4 * 4096 + 80 * 128 + 4 * 14336 + 64 + 4 * 4096) * 2;
    // The recomputed layer's forward pass holds the residual, the MLP output projection's
    // output and the gradient arriving for the layer beside it (3h), as under full checkpointing.
    let transient = 1024 * 2 * 3 * 4096 * 2;
    let op = evaluate(&source("selective-op"));
    assert_eq!(bytes(&op[0], 0, "activations"), saved + per_layer + transient);
    // As under full checkpointing, the loss is freed before the last layer is recomputed.
    let loss = 2 * 1024 * 128_256 * 12;
    assert_eq!(bytes(&op[0], 0, "logits and loss"), loss - per_layer - transient);
    let none = bytes(&evaluate(&source("none"))[0], 0, "activations");
    let full = bytes(&evaluate(&source("full"))[0], 0, "activations");
    let op = bytes(&op[0], 0, "activations");
    assert!(full < op && op < none, "{full} < {op} < {none}");
}

#[test]
fn cross_entropy_holds_three_fp32_logit_tensors_at_its_peak() {
    let source = |weights: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ weights {weights}; micro_batch 2; sequence 1024 tokens }} }}\ncheck w on h200-sxm"
        )
    };
    // 2 × 1,024 tokens × 128,256 vocab × 12 B: in backward, the fp32 log-softmax, its gradient
    // and the logits' gradient; bf16 and fp32 compute alike.
    let expected = 2 * 1024 * 128_256 * 12;
    assert_eq!(bytes(&evaluate(&source("bf16"))[0], 0, "logits and loss"), expected);
    assert_eq!(bytes(&evaluate(&source("fp32"))[0], 0, "logits and loss"), expected);
}

#[test]
fn a_16_bit_loss_holds_three_16_bit_logit_tensors() {
    let source = |loss: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ weights bf16; micro_batch 2; sequence 1024 tokens; {loss} }} }}\ncheck w on h200-sxm"
        )
    };
    // Remote code that computes the cross-entropy on 16-bit logits, without autocast: no fp32
    // upcast; in backward the bf16 log-softmax, its gradient and the logits' gradient, 2 B each.
    let logits = 2 * 1024 * 128_256;
    assert_eq!(bytes(&evaluate(&source("loss bf16"))[0], 0, "logits and loss"), logits * 6);
    assert_eq!(bytes(&evaluate(&source("loss fp32"))[0], 0, "logits and loss"), logits * 12);
    assert_eq!(bytes(&evaluate(&source(""))[0], 0, "logits and loss"), logits * 12);
}

#[test]
fn bitsandbytes_4_bit_prefill_holds_the_widest_matrix_dequantized() {
    let source = |weights: &str, context: u64, compute: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime pytorch; inference {{ weights {weights}; context {context} tokens; {compute} }} }}\ncheck w on a100-40gb"
        )
    };
    let peak = |s: String| bytes(&evaluate(&s)[0], 0, "forward-step peak");
    // The MLP's gate, up and product over 512 tokens × 14,336 (bf16) are the step's largest
    // intermediates; beside them, the gate or up matrix (4,096 × 14,336) dequantized to bf16,
    // and with an fp32 compute type also its fp32 cast.
    let mlp = 3 * 512 * 14_336 * 2;
    let matrix = 4096 * 14_336;
    assert_eq!(peak(source("nf4", 512, "")), mlp + matrix * 2);
    assert_eq!(peak(source("nf4", 512, "compute fp32")), mlp + matrix * (2 + 4));
    // One token takes bitsandbytes' gemv kernel, and other formats read their packed weights:
    // the step peaks at its one row of logits, the fp32 copy beside the 16-bit head output.
    assert_eq!(peak(source("nf4", 1, "compute fp32")), 128_256 * (4 + 2));
    assert_eq!(peak(source("int4", 512, "compute fp32")), mlp);
}

#[test]
fn a_fused_gate_and_up_projection_holds_four_mlp_widths_in_a_step() {
    // Phi-3 mini's shape (3,072 wide, ffn 8,192, 32,064 tokens of vocabulary) over a 4,096-token
    // prompt in bf16: the MLP is the step's largest intermediate. Separate gate and up hold the
    // activated gate, the up projection and the product; a fused gate_up_proj keeps its whole
    // 2 × 8,192 output while the activation and the product are made.
    let source = |mlp: &str| {
        format!(
            "model phi {{ layers 32; hidden 3072; ffn 8192; heads 32; vocab 32064; mlp {mlp} }}\n\
             workload w {{ model phi; runtime pytorch; inference {{ weights bf16; context 4096 tokens }} }}\n\
             check w on a100-sxm4-80gb"
        )
    };
    let peak = |mlp: &str| bytes(&evaluate(&source(mlp))[0], 0, "forward-step peak");
    assert_eq!(peak("gated"), 3 * 4096 * 8192 * 2);
    assert_eq!(peak("gated_fused"), 4 * 4096 * 8192 * 2);
    // The weights and a training step's stored activations are the gated MLP's.
    let weights = |mlp: &str| bytes(&evaluate(&source(mlp))[0], 0, "weights: layer matrices");
    assert_eq!(weights("gated"), weights("gated_fused"));
}

#[test]
fn a_k_bit_base_keeps_its_unquantized_parameters_and_stream_in_fp32() {
    let source = |extra: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ method lora {{ rank 8 }}; weights nf4; sequence 1024 tokens; checkpointing full{extra} }} }}\ncheck w on h200-sxm"
        )
    };
    let vocab_hidden = 128_256 * 4096;
    // PEFT's prepare_model_for_kbit_training: embedding and head in fp32; the head's matmul
    // under autocast keeps a bf16 copy; the fp32 residual stream makes each checkpointed layer
    // input fp32 (32 layers × 1,024 tokens × 4,096 × 4 B).
    let cast = &evaluate(&source(""))[0];
    assert_eq!(bytes(cast, 0, "frozen base weights: embedding"), vocab_hidden * 4);
    assert_eq!(bytes(cast, 0, "frozen base weights: output head"), vocab_hidden * 4);
    assert_eq!(bytes(cast, 0, "output head: autocast copy"), vocab_hidden * 2);
    let checkpoints = 32 * 1024 * 4096;
    let kept = &evaluate(&source("; unquantized bf16"))[0];
    assert_eq!(bytes(kept, 0, "frozen base weights: embedding"), vocab_hidden * 2);
    assert!(kept.devices[0].components.iter().all(|c| c.name != "output head: autocast copy"));
    // One recomputed layer: 4·4,096 + 80·128 + 4·14,336 elements per token, plus 4 B of fp32
    // softmax statistics per head (32 heads: 32 elements of 4 B, 64 of 2 B). On a bf16 stream,
    // each of the two RMSNorms keeps an fp32 copy of its input: 2 B more per element, 2·4,096
    // elements of 2 B (the frozen norm weights keep no normalized tensor).
    // The frozen base keeps neither norm's output nor the MLP's product (`frozen.rs`:
    // 2·4,096 + 14,336 fewer); the recomputed layer's forward pass holds them while its MLP's
    // output projection runs, with the residual, that projection's output and the gradient
    // arriving for the layer (4·4,096 + 14,336).
    let layer = 4 * 4096 + 80 * 128 + 4 * 14_336 - (2 * 4096 + 14_336);
    let transient = 4 * 4096 + 14_336;
    assert_eq!(
        bytes(cast, 0, "activations"),
        checkpoints * 4 + 1024 * (layer + 32 + transient) * 4
    );
    let upcasts = 2 * 4096;
    assert_eq!(
        bytes(kept, 0, "activations"),
        checkpoints * 2 + 1024 * (layer + 64 + upcasts + transient) * 2
    );
}

#[test]
fn headroom_takes_the_larger_of_fraction_and_floor() {
    let checks = evaluate(
        "workload w { components { x 1 GiB persistent } }\nheadroom default { keep 10 %; at_least 3 GiB }\ncheck w on l4\ncheck w on h100-sxm-80gb",
    );
    assert_eq!(
        checks[0].devices[0].headroom.bytes.0,
        3 << 30,
        "10 % of 22.49 GiB is below the 3 GiB floor"
    );
    assert_eq!(checks[1].devices[0].headroom.bytes.0, (85_520_809_984u64).div_ceil(10));
}

#[test]
fn verdicts_report_free_or_over_bytes() {
    let checks = evaluate(
        "workload w { components { x 23 GiB persistent } }\ncheck w on l4\ncheck w on 1 x h100-sxm-80gb",
    );
    let l4 = 23_034u64 << 20;
    // The built-in rule: keep 5 % of the total, at least 1 GiB; 5 % of an L4 is 1,207,644,980 B
    // (rounded up). Verdicts count what CUDA can allocate: the total less the driver's reserve
    // (an L4's CUDA total is 23,570,219,008 B, an H100's 85,045,477,376 B).
    let headroom = l4.div_ceil(20).max(1 << 30);
    assert_eq!(headroom, 1_207_644_980);
    let l4_usable = 23_570_219_008u64;
    assert_eq!(
        checks[0].verdict,
        Verdict::Over { over: vram_core::bytes::Bytes((23u64 << 30) + headroom - l4_usable) }
    );
    let h100 = 81_559u64 << 20;
    let h100_usable = 85_045_477_376u64;
    assert_eq!(
        checks[1].verdict,
        Verdict::Fits {
            free: vram_core::bytes::Bytes(h100_usable - (23u64 << 30) - h100.div_ceil(20))
        }
    );
}

#[test]
fn fp8_on_ampere_is_a_capability_error() {
    let outcome = vram_core::evaluate(
        "workload w { model mistral-7b; inference { weights fp8; context 1024 tokens } }\ncheck w on a100-40gb",
    );
    assert_eq!(outcome.status(), vram_core::Status::DoesNotFit);
    assert!(outcome.diagnostics.iter().any(|d| d.code == "E040"));
    assert!(matches!(outcome.budget.checks[0].verdict, Verdict::Unsupported { .. }));
    // vLLM and SGLang serve FP8 checkpoints on Ampere as weight-only FP8 (FP8 Marlin): the same
    // bytes, and no capability error; an FP8 KV cache or FP8 compute would still need one.
    for runtime in ["vllm", "sglang"] {
        let outcome = vram_core::evaluate(&format!(
            "workload w {{ model mistral-7b; runtime {runtime}; inference {{ weights fp8; context 1024 tokens }} }}\ncheck w on a100-40gb"
        ));
        assert!(outcome.diagnostics.iter().all(|d| d.code != "E040"), "{runtime}");
        assert!(outcome.budget.checks[0].verdict.fits(), "{runtime}");
    }
}

#[test]
fn moe_and_mla_parameter_counts_match_published_totals() {
    let count = |name| vram_core::eval::parameter_count(&shape(name)).expect("no overflow");
    // Mixtral 8x7B: 46,702,792,704 (every expert resident).
    assert_eq!(count("mixtral-8x7b"), 46_702_792_704);
    // DeepSeek-V3: 671 B in the main model (its README), MLA and 256 + 1 experts.
    let deepseek = count("deepseek-v3");
    assert!(deepseek.abs_diff(671_000_000_000) < 671_000_000_000 / 500, "{deepseek}");
    // Qwen3-30B-A3B: 30.5 B; gpt-oss-20b: 20.9 B (their model cards).
    assert!(count("qwen3-30b-a3b").abs_diff(30_500_000_000) < 100_000_000);
    assert!(count("gpt-oss-20b").abs_diff(20_900_000_000) < 100_000_000);
    // gpt-oss-120b: 116.83 B (OpenAI's model card), 128 experts of 36 layers.
    assert!(count("gpt-oss-120b").abs_diff(116_830_000_000) < 100_000_000);
}

#[test]
fn mla_caches_one_latent_per_token_per_layer() {
    let checks = evaluate(
        "workload w { model deepseek-v3; runtime none; inference { weights fp8; kv_cache bf16; context 1000 tokens } }\ncheck w on 8 x h200-sxm split tensor 8",
    );
    // DOMAIN.md §3.3: 61 × (512 + 64) × 2 B = 70,272 B per token, not divided by tensor parallel.
    assert_eq!(bytes(&checks[0], 0, "KV cache"), 70_272 * 1000);
    assert_eq!(bytes(&checks[0], 7, "KV cache"), 70_272 * 1000);
}

#[test]
fn sliding_window_layers_keep_at_most_the_window() {
    let checks = evaluate(
        "workload w { model gemma2-9b; runtime none; inference { weights bf16; context 8192 tokens } }\ncheck w on h100-sxm-80gb",
    );
    // 42 layers, 8 kv heads of 256: 21 global layers keep 8192 tokens, 21 local ones 4096.
    let per_token_layer = 2 * 8 * 256 * 2;
    assert_eq!(
        bytes(&checks[0], 0, "KV cache"),
        21 * per_token_layer * 8192 + 21 * per_token_layer * 4096
    );
}

#[test]
fn llama_cpp_presets_match_published_llama_3_8b_sizes() {
    // tools/quantize/quantize.cpp lists Llama-3-8B sizes in GiB (DOMAIN.md §1.6).
    let published = [
        ("q2_k", 296),
        ("q3_k_s", 341),
        ("q3_k_m", 374),
        ("q3_k_l", 403),
        ("q4_0", 434),
        ("q4_1", 478),
        ("q4_k_s", 437),
        ("q4_k_m", 458),
        ("q5_0", 521),
        ("q5_1", 565),
        ("q5_k_s", 521),
        ("q5_k_m", 533),
        ("q6_k", 614),
        ("q8_0", 796),
    ];
    // Sizes in hundredths of a GiB; the published figures are rounded to 0.01, so allow 0.5 %.
    for (preset, hundredths) in published {
        let source = format!(
            "workload w {{ model llama3.1-8b; runtime none; inference {{ weights {preset}; context 16 tokens }} }}\ncheck w on h100-sxm-80gb"
        );
        let weights = bytes(&evaluate(&source)[0], 0, "weights");
        let expected = hundredths * (1u64 << 30) / 100;
        assert!(
            weights.abs_diff(expected) * 200 < expected,
            "{preset}: {weights} B against {expected} B published"
        );
    }
}

#[test]
fn llama_cpp_presets_match_published_llama_3_1_70b_files() {
    // bartowski/Meta-Llama-3.1-70B-Instruct-GGUF's file table (GB, 10^9 B; imatrix quants),
    // which holds the i-quant mixes and llama.cpp's 70B rule (`attn_v` Q3_K/Q4_K → Q5_K).
    // A file also holds its metadata and vocabulary (about 10 MB), so allow 0.2 %.
    let published = [
        ("q3_k_s", 3091),
        ("iq3_m", 3194),
        ("q3_k_m", 3427),
        ("q3_k_l", 3714),
        ("iq4_xs", 3790),
        ("q4_k_s", 4035),
        ("q4_k_m", 4252),
        ("q5_k_s", 4866),
        ("q5_k_m", 4995),
        ("q6_k", 5789),
        ("q8_0", 7498),
    ];
    for (preset, hundredths) in published {
        let source = format!(
            "workload w {{ model llama3.1-70b; runtime none; inference {{ weights {preset}; context 16 tokens }} }}\ncheck w on h100-sxm-80gb"
        );
        let weights = bytes(&evaluate(&source)[0], 0, "weights");
        let expected = hundredths * 10_000_000;
        assert!(
            weights.abs_diff(expected) * 500 < expected,
            "{preset}: {weights} B against {expected} B published"
        );
    }
}

#[test]
fn iq4_xs_keeps_q5_k_values_and_a_q6_k_head() {
    // Llama 3.1 8B (4 query heads per KV head): attn_v → Q5_K, every other matrix IQ4_XS
    // (256 elements in 136 B), the untied embedding IQ4_XS and the output Q6_K.
    let source = "workload w { model llama3.1-8b; runtime none; inference { weights iq4_xs; context 16 tokens } }\ncheck w on l4";
    let checks = evaluate(source);
    let v = 32 * 4096 * 1024;
    let rest = 32 * 218_103_808 - v;
    assert_eq!(bytes(&checks[0], 0, "weights: layer matrices"), v * 176 / 256 + rest * 136 / 256);
    assert_eq!(bytes(&checks[0], 0, "weights: embedding"), 128_256 * 4096 * 136 / 256);
    assert_eq!(bytes(&checks[0], 0, "weights: output head"), 128_256 * 4096 * 210 / 256);
}

#[test]
fn two_bit_i_quants_give_the_head_q5_k_and_the_embedding_q2_k() {
    let source = "workload w { model llama3.1-8b; runtime none; inference { weights iq2_xxs; context 16 tokens } }\ncheck w on l4";
    let checks = evaluate(source);
    // attn_v Q4_K (grouped KV heads), the first 4 of 32 ffn_down Q2_K, the rest IQ2_XXS.
    let v = 32 * 4096 * 1024;
    let down = 4 * 14336 * 4096;
    let rest = 32 * 218_103_808 - v - down;
    assert_eq!(
        bytes(&checks[0], 0, "weights: layer matrices"),
        v * 144 / 256 + down * 84 / 256 + rest * 66 / 256
    );
    assert_eq!(bytes(&checks[0], 0, "weights: embedding"), 128_256 * 4096 * 84 / 256);
    assert_eq!(bytes(&checks[0], 0, "weights: output head"), 128_256 * 4096 * 176 / 256);
}

#[test]
fn q4_k_m_mixes_types_per_layer() {
    let source = "workload w { model llama3.1-8b; runtime none; inference { weights q4_k_m; context 16 tokens } }\ncheck w on l4";
    let checks = evaluate(source);
    // 16 of 32 layers give attn_v and ffn_down Q6_K (use_more_bits); the rest is Q4_K.
    let q6 = 16 * (4096 * 1024 + 14336 * 4096);
    let q4 = 32 * 218_103_808 - q6;
    assert_eq!(
        bytes(&checks[0], 0, "weights: layer matrices"),
        (q6 * 210 / 256) + (q4 * 144 / 256)
    );
    assert_eq!(bytes(&checks[0], 0, "weights: output head"), 128_256 * 4096 * 210 / 256);
}

#[test]
fn qlora_base_in_nf4_with_double_quantization() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime none; training { method lora { rank 16 }; weights nf4-dq; sequence 512 tokens } }\ncheck w on rtx-4090",
    );
    // Layer matrices at 4.127 bits; embedding, head and norms in fp32 (PEFT's k-bit cast).
    let matrices = 32 * 218_103_808u64;
    let expected = (matrices * (4 * 16384 + 2048 + 32)).div_ceil(16384 * 8);
    assert_eq!(bytes(&checks[0], 0, "frozen base weights: layer matrices"), expected);
    assert_eq!(bytes(&checks[0], 0, "frozen base weights: embedding"), 128_256 * 4096 * 4);
}

#[test]
fn bitsandbytes_before_0_43_2_keeps_every_4_bit_layers_input() {
    let source = |weights: &str, release: &str, checkpointing: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ method lora {{ rank 16; dtype bf16 }}; weights {weights}; activations bf16; unquantized bf16; sequence 1024 tokens; checkpointing {checkpointing}; bitsandbytes \"{release}\" }} }}\ncheck w on h200-sxm"
        )
    };
    let kept = |source: &str| {
        evaluate(source)[0].devices[0]
            .components
            .iter()
            .filter(|c| c.name == "4-bit layers' kept inputs")
            .map(|c| c.bytes.0)
            .sum::<u64>()
    };
    // MatMul4Bit's inputs per token and layer: the attention and MLP norms' outputs (4,096
    // each), the attention output (32 heads × 128) and the MLP product (14,336), in bf16.
    let per_token = 2 * 4096 + 4096 + 14_336;
    assert_eq!(kept(&source("nf4", "0.41.1", "none")), 32 * 1024 * per_token * 2);
    // PR #1270 (0.43.2) keeps `(None, B)`; a 16-bit base has no MatMul4Bit; checkpointing's
    // first forward builds no graph.
    assert_eq!(kept(&source("nf4", "0.43.2", "none")), 0);
    assert_eq!(kept(&source("bf16", "0.41.1", "none")), 0);
    assert_eq!(kept(&source("nf4-dq", "0.42", "full")), 0);
    // A release that is not one is an error with a code.
    let outcome = vram_core::evaluate(&source("nf4", "soon", "none"));
    assert!(outcome.diagnostics.iter().any(|d| d.is_error() && d.code == "E013"));
}

#[test]
fn a_partly_quantized_checkpoint_keeps_its_other_matrices_16_bit() {
    let source = |scope: &str| {
        format!(
            "workload w {{ model llama3.1-405b; runtime none; inference {{ weights fp8;{scope} context 16 tokens }} }}\ncheck w on 8 x h100-sxm-80gb split tensor 8"
        )
    };
    // Per tensor-parallel rank: an MLP layer 3 × 16,384 × 53,248 / 8 = 327,155,712 params,
    // an attention layer (2 × 16,384² + 2 × 16,384 × 1,024) / 8 = 71,303,168.
    let (mlp, attention) = (327_155_712u64, 71_303_168u64);
    // Meta's FP8 release: FP8 on the MLP of 124 layers; bf16 on the first and last layers' MLP
    // and on every attention.
    let meta = evaluate(&source(" quantized_matrices mlp; unquantized_layers 1;"));
    assert_eq!(
        bytes(&meta[0], 0, "weights: layer matrices"),
        124 * mlp + (2 * mlp + 126 * attention) * 2
    );
    assert_eq!(bytes(&meta[0], 0, "weights: embedding"), 128_256 * 16_384 / 8 * 2);
    // The attention only, every layer.
    let attention_only = evaluate(&source(" quantized_matrices attention;"));
    assert_eq!(
        bytes(&attention_only[0], 0, "weights: layer matrices"),
        126 * attention + 126 * mlp * 2
    );
    // Neither field: every matrix in FP8.
    assert_eq!(
        bytes(&evaluate(&source(""))[0], 0, "weights: layer matrices"),
        126 * (mlp + attention)
    );
}

#[test]
fn gptq_weights_pay_for_group_scales() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime none; inference { weights gptq-int4; context 16 tokens } }\ncheck w on l4",
    );
    // 4 + (16 + 4) / 128 bits per weight with group size 128.
    let matrices = 32 * 218_103_808u64;
    assert_eq!(
        bytes(&checks[0], 0, "weights: layer matrices"),
        (matrices * (4 * 128 + 20)).div_ceil(128 * 8)
    );
}

#[test]
fn zero_stages_divide_model_states_over_data_ranks() {
    let source = |sharding: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ weights bf16; sequence 512 tokens; sharding {sharding}; zero_grad zeros }} }}\ncheck w on 8 x a100-sxm4-80gb split data 8"
        )
    };
    let p = 8_030_261_248u64;
    let none = evaluate(&source("none"));
    assert_eq!(bytes(&none[0], 3, "optimizer state"), 8 * p);
    let zero1 = evaluate(&source("zero1"));
    assert_eq!(bytes(&zero1[0], 3, "optimizer state"), 8 * p / 8);
    assert_eq!(bytes(&zero1[0], 3, "master weights"), 4 * p / 8);
    // DeepSpeed keeps 16-bit gradients, all of them under ZeRO-1, a partition under ZeRO-2.
    assert_eq!(bytes(&zero1[0], 3, "gradients"), 2 * p);
    let zero2 = evaluate(&source("zero2"));
    assert_eq!(bytes(&zero2[0], 3, "gradients"), 2 * p / 8);
    let fsdp = evaluate(&source("fsdp-grad-op"));
    assert_eq!(bytes(&fsdp[0], 3, "gradients"), 4 * p / 8);
    assert_eq!(bytes(&zero2[0], 3, "weights"), 2 * p);
    let zero3 = evaluate(&source("fsdp-full"));
    assert_eq!(bytes(&zero3[0], 3, "weights"), 2 * p / 8);
    // One decoder layer gathered in full, weights and gradients at 2 B each.
    assert_eq!(bytes(&zero3[0], 3, "gathered layer"), 218_103_808 * 4);
}

#[test]
fn eight_bit_adam_keeps_two_bytes_and_block_scales_per_parameter() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime none; training { weights bf16; optimizer adamw-8bit; sequence 512 tokens } }\ncheck w on h200-sxm",
    );
    // 2 states × (1 B + 4 B / 256) = 2.03125 B per parameter (bitsandbytes blocksize 256).
    assert_eq!(bytes(&checks[0], 0, "optimizer state"), 8_030_261_248 * 65 / 32);
}

#[test]
fn vllms_profile_run_peaks_while_its_sampler_sorts_the_vocabulary() {
    let source = |split: &str, max_sequences: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime vllm; inference {{ weights bf16; context 8192 tokens; sessions 1{max_sequences} }} }}\ncheck w on {split}"
        )
    };
    // Llama 3.1 8B, 8192 tokens over 256 sequences: one row of 128,256 logits per sequence,
    // 2 B (bf16 logits) + 4 (fp32 copy) + 4 + 8 (sorted values, int64 indices) + 8 (int64
    // index input) + 4 + 8 (CUB's alternate buffers) = 38 B per entry, less the residual
    // (8192 × 4096 × 2 B) freed after the last layer.
    let sampler = 256 * 128_256 * 38 - 8192 * 4096 * 2;
    assert_eq!(sampler, 1_180_565_504);
    let hidden = 2 * 8192 * 4096 * 2;
    for split in ["h100-sxm-80gb", "2 x h100-sxm-80gb split tensor 2"] {
        let checks = evaluate(&source(split, "; max_sequences 256"));
        // The sampled rows are not divided by tensor parallelism (vLLM gathers the logits),
        // so one and two GPUs peak alike; the sort outweighs the MLP (3 × 8192 × 14,336 × 2 B).
        assert_eq!(bytes(&checks[0], 0, "forward-step peak"), sampler, "{split}");
        assert_eq!(bytes(&checks[0], 0, "hidden states"), hidden);
    }
    // Without max_sequences, vLLM's default for an 80 GB H100: 1024 sequences.
    let checks = evaluate(&source("h100-sxm-80gb", ""));
    assert_eq!(bytes(&checks[0], 0, "forward-step peak"), 1024 * 128_256 * 38 - 8192 * 4096 * 2);
}

#[test]
fn vllm_fills_its_share_of_the_device_with_kv_blocks() {
    let source = |sessions: u64| {
        format!(
            "workload w {{ model llama3.1-8b; runtime vllm; inference {{ weights bf16; context 8192 tokens; sessions {sessions}; memory_fraction 90 % }} }}\ncheck w on h100-sxm-80gb"
        )
    };
    let checks = evaluate(&source(16));
    let device = &checks[0].devices[0];
    let pool = device.kv_pool.as_ref().expect("vLLM reports its pool");
    // Everything vLLM holds when it sizes the pool; its CUDA graphs are captured afterwards.
    let others: u64 = device
        .components
        .iter()
        .filter(|c| c.name != "KV cache pool (vLLM)" && c.name != "CUDA graphs")
        .map(|c| c.bytes.0)
        .sum();
    // 90 % of CUDA's total (vLLM's `torch.cuda.mem_get_info()`): the H100's 85,520,809,984 B
    // less the 475,332,608 B its driver keeps.
    let share = 85_045_477_376u64 * 9 / 10;
    // Whole blocks of 16 tokens × 131,072 B per token.
    let blocks = (share - others) / (16 * 131_072);
    assert_eq!(pool.tokens, blocks * 16);
    assert_eq!(pool.bytes.0, blocks * 16 * 131_072);
    assert_eq!(pool.needed_tokens, 16 * 8192);
    assert_eq!(bytes(&checks[0], 0, "KV cache pool"), pool.bytes.0);
    assert!(checks[0].verdict.fits());
    // Sessions beyond the pool: the verdict says by how much the pool falls short.
    let checks = evaluate(&source(64));
    let pool = checks[0].devices[0].kv_pool.clone().expect("pool");
    assert_eq!(
        checks[0].verdict,
        Verdict::Over { over: vram_core::bytes::Bytes(64 * 8192 * 131_072 - pool.bytes.0) }
    );
    // ...and the budget carries the cache the sessions need, in the pool's units.
    assert_eq!(bytes(&checks[0], 0, "KV cache"), 64 * 8192 * 131_072);
    assert!(checks[0].devices[0].used.0 > share);
    // Weights too large for the share leave no pool, and more than the KV is missing: the
    // sessions' KV plus what everything else exceeds the share by (70B in bf16 on one H100:
    // 131 GiB of weights against 71.7 GiB).
    let big = source(16).replace("llama3.1-8b", "llama3.1-70b");
    let checks = evaluate(&big);
    let device = &checks[0].devices[0];
    let pool = device.kv_pool.clone().expect("pool");
    assert_eq!(pool.tokens, 0);
    let kv = bytes(&checks[0], 0, "KV cache");
    // The CUDA graphs come on top of the share, captured after the pool is sized.
    let others = device.used.0 - kv - bytes(&checks[0], 0, "CUDA graphs");
    assert!(others > share);
    assert_eq!(
        checks[0].verdict,
        Verdict::Over { over: vram_core::bytes::Bytes(kv + others - share) }
    );
}

#[test]
fn textures_count_every_mip_level_in_whole_blocks() {
    let checks = evaluate(
        "workload w { scene {\n texture a { size 2048 x 2048; format bc7; mips true }\n texture b { size 1000 x 600; format bc1 }\n texture c { size 512; format rgba8; cube true; mips true }\n target t { size 3840 x 2160; format rgba16f; samples 4 }\n } }\ncheck w on l4",
    );
    // BC7: 16 B per 4×4 block; 2048² down to 1×1 is 12 levels, the last three one block each.
    let bc7: u64 =
        [512u64 * 512, 256 * 256, 128 * 128, 64 * 64, 32 * 32, 16 * 16, 64, 16, 4, 1, 1, 1]
            .iter()
            .sum::<u64>()
            * 16;
    assert_eq!(bytes(&checks[0], 0, "textures: a"), bc7);
    // BC1 rounds 1000 × 600 up to 250 × 150 blocks of 8 B, no mips.
    assert_eq!(bytes(&checks[0], 0, "textures: b"), 250 * 150 * 8);
    // A cube map: six faces, each with its chain (512² … 1², 10 levels) of 4 B texels.
    let chain: u64 = (0..10).map(|l| (512u64 >> l) * (512 >> l)).sum();
    assert_eq!(bytes(&checks[0], 0, "textures: c"), 6 * chain * 4);
    // MSAA multiplies a target by its samples.
    assert_eq!(bytes(&checks[0], 0, "render target: t"), 3840 * 2160 * 8 * 4);
}

#[test]
fn bands_widen_with_assumptions_and_vanish_for_exact_sizes() {
    let checks = evaluate("workload w { components { x 10 GiB persistent } }\ncheck w on l4");
    let device = &checks[0].devices[0];
    assert_eq!(
        (device.band.low, device.band.high),
        (device.used, device.used),
        "exact sizes are certain"
    );
    let checks = evaluate(LLAMA_8B_CHAT);
    let device = &checks[0].devices[0];
    assert!(device.band.low < device.used && device.used < device.band.high);
    // Formula-derived weights and cache at 3 %, activations at 35 %; or the spread measured for
    // inference, whichever is wider on each side.
    let spread: u64 = device
        .components
        .iter()
        .map(|c| {
            let per_mille =
                if c.category == vram_core::budget::Category::Intermediate { 350 } else { 30 };
            (c.bytes.0 * per_mille).div_ceil(1000)
        })
        .sum();
    let (below, above) = vram_core::eval::measured_margins(BandBasis::Inference);
    assert!(below > 0 && above > below, "inference peaks fall further above than below");
    let used = device.used.0;
    assert_eq!(device.band.basis, BandBasis::Inference);
    assert_eq!(device.band.high.0 - used, spread.max((used * above).div_ceil(1000)));
    assert_eq!(used - device.band.low.0, spread.max((used * below).div_ceil(1000)));
}

#[test]
fn mixed_precision_with_fp32_weights_keeps_16_bit_copies() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime none; training { weights fp32; activations bf16; sequence 512 tokens } }\ncheck w on h200-sxm",
    );
    let p = 8_030_261_248u64;
    // HF model_memory_anatomy: 4 + 2 bytes of weights per parameter under mixed precision.
    assert_eq!(bytes(&checks[0], 0, "weights"), 4 * p);
    assert_eq!(bytes(&checks[0], 0, "16-bit weight copies"), 2 * p);
    assert!(checks[0].devices[0].components.iter().all(|c| c.name != "master weights"));
}

#[test]
fn offloaded_optimizer_state_leaves_the_device() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime none; training { weights bf16; sequence 512 tokens; offload optimizer; zero_grad zeros } }\ncheck w on h200-sxm",
    );
    let names: Vec<&str> = checks[0].devices[0].components.iter().map(|c| &*c.name).collect();
    assert!(!names.contains(&"optimizer state") && !names.contains(&"master weights"), "{names:?}");
    assert!(names.contains(&"gradients"));
}

#[test]
fn zero_offload_keeps_the_gradients_on_the_host_too() {
    let source = "
machine box { gpus 2 x h200-sxm; host_ram 2 TiB; disk 10 TB }
workload w { model llama3.1-8b; runtime none; training { weights bf16; sequence 512 tokens; sharding zero2; offload optimizer } }
check w on box split data 2";
    let outcome = vram_core::evaluate(source);
    let check = &outcome.budget.checks[0];
    let names: Vec<&str> = check.devices[0].components.iter().map(|c| &*c.name).collect();
    assert!(!names.contains(&"gradients"), "{names:?}");
    // Only the reduce buckets stay: two of 5e8 bf16 elements.
    assert_eq!(bytes(check, 0, "ZeRO gradient buckets (DeepSpeed)"), 2 * 500_000_000 * 2);
    // The host holds master (4), AdamW moments (8) and the fp32 gradient partition (4).
    let host = check.host.as_ref().expect("a machine has host lines");
    let offloaded = host.ram.components.iter().find(|c| c.name.contains("offloaded")).unwrap();
    assert_eq!(offloaded.bytes.0, 8_030_261_248 * 16);
}

#[test]
fn parameter_offload_keeps_the_parameters_on_the_host_too() {
    let source = "
machine box { gpus 2 x h200-sxm; host_ram 2 TiB; disk 10 TB }
workload w { model llama3.1-8b; runtime none; training { weights bf16; sequence 512 tokens; sharding zero3; offload parameters } }
check w on box split data 2";
    let outcome = vram_core::evaluate(source);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    let host = outcome.budget.checks[0].host.as_ref().expect("a machine has host lines");
    let offloaded = host.ram.components.iter().find(|c| c.name.contains("offloaded")).unwrap();
    // The bf16 parameters (2), master (4), AdamW moments (8) and fp32 gradients (4).
    assert_eq!(offloaded.bytes.0, 8_030_261_248 * 18);
    assert!(offloaded.name.contains("parameters"), "{}", offloaded.name);
}

#[test]
fn lora_can_train_the_embedding_and_head_in_full() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime none; training { method lora { rank 8; modules_to_save embeddings head }; weights bf16; sequence 512 tokens; zero_grad zeros } }\ncheck w on h200-sxm",
    );
    let saved = 2 * 128_256 * 4096u64;
    assert_eq!(bytes(&checks[0], 0, "saved modules (trainable copy)"), saved * 2);
    // A gradient has its parameter's type: the bf16 copy's, not the fp32 adapters'.
    assert_eq!(bytes(&checks[0], 0, "saved modules: gradients"), saved * 2);
    assert_eq!(
        bytes(&checks[0], 0, "adapter gradients"),
        bytes(&checks[0], 0, "LoRA adapters"),
        "the fp32 adapters' gradients are fp32"
    );
    // Pure bf16 (no master copy): PyTorch's AdamW keeps its two moments in bf16 too.
    assert_eq!(bytes(&checks[0], 0, "saved modules: optimizer state"), saved * 4);
}

#[test]
fn int8_kv_with_per_token_scales() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime none; inference { weights bf16; kv_cache int8-token; context 1000 tokens } }\ncheck w on l4",
    );
    // 1 B per element plus an fp32 scale and zero point per token per KV head, for K and V.
    assert_eq!(bytes(&checks[0], 0, "KV cache"), 2 * 32 * 8 * 128 * 1000 + 2 * 32 * 8 * 1000 * 8);
}

#[test]
fn a_model_from_config_json_matches_the_written_shape() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/import/configs/meta-llama-Meta-Llama-3.1-8B.json"
    );
    let text = std::fs::read(path).expect("fixture");
    let imported = vram_core::import::config_json::parse(&text).expect("a valid config");
    let mut imports = vram_core::import::Imports::new();
    imports.insert("llama/config.json".to_string(), Ok(imported));
    let source = "model m {\n  from \"llama/config.json\"\n}\nworkload w { model m; runtime none; inference { weights bf16; context 4096 tokens } }\ncheck w on h100-sxm-80gb\n";
    let outcome = vram_core::evaluate_with_imports(source, vram_core::catalog::builtin(), &imports);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    assert_eq!(bytes(&outcome.budget.checks[0], 0, "weights"), 8_030_261_248 * 2);
    assert_eq!(vram_core::import_paths(source), ["llama/config.json"]);
    // A path the front end did not read is an error at the path, not a silent default.
    let outcome = vram_core::evaluate(source);
    let diagnostic = outcome.diagnostics.iter().find(|d| d.code == "E023").expect("E023");
    assert_eq!(diagnostic.primary.text(source), "\"llama/config.json\"");
    assert!(outcome.budget.checks.is_empty());
}

#[test]
fn growing_caches_hold_a_previous_copy() {
    let source = |layout: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime pytorch; inference {{ weights bf16; context 4096 tokens; sessions 2; cache_layout {layout} }} }}\ncheck w on h100-sxm-80gb"
        )
    };
    let kv = 131_072 * 4096 * 2;
    let tuple = evaluate(&source("tuple"));
    assert_eq!(bytes(&tuple[0], 0, "KV cache: previous copy"), kv);
    let concatenated = evaluate(&source("concatenated"));
    assert_eq!(bytes(&concatenated[0], 0, "KV cache: previous copy"), kv / 32);
    let preallocated = evaluate(&source("preallocated"));
    assert!(
        preallocated[0].devices[0]
            .components
            .iter()
            .all(|c| !c.name.starts_with("KV cache: previous"))
    );
}

#[test]
fn deepspeed_zero2_reduces_gradients_through_two_buckets() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime none; training { weights bf16; sequence 512 tokens; sharding zero2; bucket_elements 200_000_000 } }\ncheck w on 2 x a100-sxm4-80gb split data 2",
    );
    assert_eq!(bytes(&checks[0], 0, "ZeRO gradient buckets"), 2 * 200_000_000 * 2);
    let fsdp = evaluate(
        "workload w { model llama3.1-8b; runtime none; training { weights bf16; sequence 512 tokens; sharding fsdp-grad-op } }\ncheck w on 2 x a100-sxm4-80gb split data 2",
    );
    assert!(
        fsdp[0].devices[0].components.iter().all(|c| !c.name.starts_with("ZeRO gradient buckets"))
    );
}

#[test]
fn llama_cpp_keeps_the_token_embedding_in_host_memory() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime llama.cpp; inference { weights q4_k_m; context 4096 tokens } }\ncheck w on rtx-4090",
    );
    let embedding = checks[0].devices[0]
        .components
        .iter()
        .find(|c| c.name.contains("embedding"))
        .expect("listed");
    assert_eq!(embedding.bytes.0, 0);
    assert!(embedding.formula.contains("host memory"));
    // Its compute buffer holds fp32 logits for each of the 512 tokens of a batch.
    let peak = bytes(&checks[0], 0, "forward-step peak");
    assert!(peak >= 512 * 128_256 * 4, "{peak}");
}

#[test]
fn llama_cpp_compute_buffer_keeps_one_f32_score_matrix_and_the_kq_mask() {
    let source = |attention: &str, context: u64, sessions: u64| {
        format!(
            "workload w {{ model mistral-7b; runtime llama.cpp; inference {{ weights q4_k_m; activations fp32; context {context} tokens; sessions {sessions}; prefill_chunk 512 tokens; attention {attention} }} }}\ncheck w on h100-sxm-80gb"
        )
    };
    // Without flash attention (llama.cpp issue #7450: -c 32000, n_ubatch 512, "CUDA0 compute
    // buffer size = 2094.50 MiB"): q, k, v and the output, 512 x 80 heads x 128 in F32; one F32
    // KQ matrix of 512 x 32,000 x 32 heads (the softmax is written over it); the F32 mask of
    // 32,000 cells x 512 tokens.
    let eager = 512 * 80 * 128 * 4 + 512 * 32_000 * 32 * 4 + 32_000 * 512 * 4;
    assert_eq!(bytes(&evaluate(&source("eager", 32_000, 1))[0], 0, "forward-step peak"), eager);
    // With flash attention the layers read the mask's F16 cast; the MLP's three F32 tensors
    // (512 x 14,336) beside it outweigh the 512 x 32,768 F32 logits. Two slots of 16,000 tokens
    // share one cache of 32,000 cells, which the worst-case graph attends over.
    let fused = 3 * 512 * 14_336 * 4 + 32_000 * 512 * 2;
    assert_eq!(bytes(&evaluate(&source("fused", 16_000, 2))[0], 0, "forward-step peak"), fused);
}

#[test]
fn diffusion_pipelines_keep_every_model_and_the_largest_phase() {
    let source = |extra: &str| {
        format!(
            "model dit {{ params 2 billion }}\nmodel te {{ params 1 billion }}\nmodel ae {{ params 80 million }}\nworkload w {{ runtime none; diffusion {{ denoiser dit; text_encoders te; vae ae; weights bf16; architecture dit; resolution 1024 x 1024; text_tokens 256 tokens{extra} }} }}\ncheck w on h100-sxm-80gb"
        )
    };
    let checks = evaluate(&source("; hidden 1536"));
    assert_eq!(bytes(&checks[0], 0, "denoiser weights"), 4_000_000_000);
    assert_eq!(bytes(&checks[0], 0, "text encoder weights"), 2_000_000_000);
    assert_eq!(bytes(&checks[0], 0, "VAE weights"), 160_000_000);
    // The VAE decode at full resolution (the last upsample's convolution: its input, the nearest
    // copy, the output and cuDNN's NHWC copies of those two, 8.5 × 128 = 1,088 channels per
    // pixel) outweighs one transformer block over 2 × (4096 + 256) tokens (classifier-free
    // guidance doubles the batch).
    assert_eq!(bytes(&checks[0], 0, "VAE decode peak"), 1024 * 1024 * 1088 * 2);
    assert!(
        checks[0].devices[0].components.iter().all(|c| !c.name.starts_with("denoiser activations"))
    );
    // The reserved view replays the caching allocator. The step's freed blocks (4 × 25.5 MiB,
    // 2 × 102 MiB: 4 × 26 + 2 × 102 MiB of segments, rounded to 2 MiB) stay cached and serve
    // every decoder tensor at 128² and the 64 MiB ones at 256², two of the 26 MiB ones left
    // unused; the two 128 MiB convolution workspaces at 256² add 2 × 128 MiB, the 512² stage
    // 1,408 MiB and the full-resolution stage 2,304 MiB (`vae_decode.rs`'s tests): 4,276 MiB
    // reserved, of which the decode's 2,176 MiB are live tensors.
    let mib = 1 << 20;
    assert_eq!(cached(&checks[0], 0), (2 * 26 + 256 + 2 * 128 + 1408 + 2304 - 2176) * mib);
    let views = &checks[0].devices[0].views;
    assert_eq!(views.reserved.0 - views.allocated.0, cached(&checks[0], 0));
    // A device without room gets most of it back: replayed with unused segments returned
    // before each new one, the decode reserves 2,688 MiB (`vae_decode.rs`'s tests; the step's
    // segments go back with the rest), so 512 MiB stay needed beyond the live 2,176 MiB and the
    // other 4,276 − 2,688 = 1,588 MiB are releasable, in `used` and the reserved view but not in
    // `required`.
    let device = &checks[0].devices[0];
    let releasable = device
        .components
        .iter()
        .find(|c| c.held_by == vram_core::budget::HeldBy::ReleasableCache)
        .expect("the earlier stages' segments are releasable");
    assert_eq!(releasable.bytes.0, 1588 * mib);
    assert_eq!(bytes(&checks[0], 0, "allocator cache"), 512 * mib);
    assert_eq!(device.releasable, releasable.bytes);
    assert_eq!(device.required.0, device.used.0 - 1588 * mib + device.headroom.bytes.0);
    // diffusers tiles at the VAE config's `sample_size`, 1024 for this autoencoder family by
    // default: a 1024² image is no larger than one tile and decodes whole.
    let whole = evaluate(&source("; hidden 1536; vae_tiling true"));
    assert_eq!(bytes(&whole[0], 0, "VAE decode peak"), 1024 * 1024 * 1088 * 2);
    let tiled = evaluate(&source("; hidden 1536; vae_tiling true; vae_tile 512"));
    assert_eq!(bytes(&tiled[0], 0, "VAE decode peak"), 512 * 512 * 1088 * 2);
    // A wider transformer with a decode tiled at 256²: the denoising step (612 MiB) is the
    // larger transient (the tile's 256² × 1,088 × 2 B = 136 MiB). Its blocks (4 × 52 + 2 × 204
    // MiB) serve every large-pool tensor of the tile; at the tile's latent resolution (32²) a
    // 512-channel tensor is exactly 1 MiB, a small-pool request, and the first ResNet block's
    // input, norm and SiLU open three 2 MiB small-pool segments.
    let wide = evaluate(&source("; hidden 3072; vae_tiling true; vae_tile 256"));
    let step = 2 * (4096 + 256) * 3072 * 12 * 2;
    assert_eq!(bytes(&wide[0], 0, "denoiser activations"), step);
    assert!(wide[0].devices[0].components.iter().all(|c| c.name != "VAE decode peak"));
    let cache = cached(&wide[0], 0);
    assert_eq!(cache, (4 * 52 + 2 * 204 + 3 * 2) * mib - step);
    // Offloading whole models: only the heaviest phase is on the device.
    let offloaded = evaluate(&source("; hidden 1536; offload model"));
    let names: Vec<&str> = offloaded[0].devices[0].components.iter().map(|c| &*c.name).collect();
    assert!(
        names.contains(&"denoiser weights: dit") && !names.contains(&"text encoder weights: te"),
        "{names:?}"
    );
}

#[test]
fn a_sliced_decode_holds_one_image_and_the_earlier_outputs() {
    let source = |extra: &str| {
        format!(
            "model dit {{ params 2 billion }}\nmodel te {{ params 1 billion }}\nmodel ae {{ params 80 million }}\nworkload w {{ runtime none; diffusion {{ denoiser dit; text_encoders te; vae ae; weights bf16; architecture dit; hidden 1536; resolution 1024 x 1024; text_tokens 256 tokens; batch 4{extra} }} }}\ncheck w on h100-sxm-80gb"
        )
    };
    // Four images decode together: four times the last upsample's 1,088 channels per pixel.
    let whole = evaluate(&source(""));
    assert_eq!(bytes(&whole[0], 0, "VAE decode peak"), 4 * 1024 * 1024 * 1088 * 2);
    // Sliced (diffusers `enable_slicing`): one image's tensors, beside the three images decoded
    // before it (3 channels × 1024² × 2 B each), kept for the final concatenation.
    let sliced = evaluate(&source("; vae_slicing true"));
    assert_eq!(bytes(&sliced[0], 0, "VAE decode peak"), 1024 * 1024 * 1088 * 2);
    assert_eq!(
        bytes(&sliced[0], 0, "decoded images of the earlier slices"),
        3 * 3 * 1024 * 1024 * 2
    );
    assert!(sliced[0].devices[0].views.reserved < whole[0].devices[0].views.reserved);
    // One image decodes alone anyway: the setting changes nothing and says so.
    let outcome = vram_core::evaluate(&source("; vae_slicing true").replace("batch 4", "batch 1"));
    assert!(outcome.diagnostics.iter().any(|d| d.code == "W005"), "{:?}", outcome.diagnostics);
}

#[test]
fn a_video_pipeline_denoises_its_latent_frames_and_decodes_them_in_batches() {
    // A denoiser heavy enough that under model offload its phase is the one on the device.
    let source = |extra: &str| {
        format!(
            "model dit {{ params 50 billion }}\nmodel ae {{ params 215 million }}\nworkload w {{ runtime none; diffusion {{ denoiser dit; vae ae; weights bf16; architecture dit; hidden 1536; resolution 720 x 480; text_tokens 226 tokens; offload model{extra} }} }}\ncheck w on h200-sxm"
        )
    };
    let step = |tokens: u64| 2 * tokens * 1536 * 12 * 2;
    // 49 frames through a causal VAE of temporal factor 4: the first frame, then 48 / 4, 13
    // latent frames of 60 × 90 latents, in 2 × 2 patches: 13 × 1350 = 17,550 tokens + 226.
    let video = evaluate(&source("; video_frames 49"));
    assert_eq!(bytes(&video[0], 0, "denoiser activations"), step(17_550 + 226));
    // The same as 13 latent frames given directly.
    let latent = evaluate(&source("; frames 13"));
    assert_eq!(bytes(&latent[0], 0, "denoiser activations"), step(17_550 + 226));
    // 45 frames: 1 + 44 / 4 = 12 latent frames; a factor of 8 gives 49 frames 1 + 48 / 8 = 7.
    let shorter = evaluate(&source("; video_frames 45"));
    assert_eq!(bytes(&shorter[0], 0, "denoiser activations"), step(12 * 1350 + 226));
    let eight = evaluate(&source("; video_frames 49; vae_temporal 8"));
    assert_eq!(bytes(&eight[0], 0, "denoiser activations"), step(7 * 1350 + 226));
    // Without offload the decode is the largest transient: the first frame batch (3 latent
    // frames, 9 decoded) holds six 256-channel tensors of 9 × 480 × 720 at one spatial norm,
    // and the later batches add the caches of the batch before.
    let whole = evaluate(&source("").replace("; offload model", "; video_frames 49"));
    let decode = bytes(&whole[0], 0, "VAE decode peak (causal 3D)");
    assert!(decode > 6 * 256 * 9 * 480 * 720 * 2, "{decode}");
    // A tiled decode (tiles of 360 × 240) holds one tile's tensors and the tiles decoded before.
    let tiled = evaluate(
        &source("")
            .replace("; offload model", "; video_frames 49; vae_tiling true; vae_tile 360 x 240"),
    );
    let tile = bytes(&tiled[0], 0, "VAE decode peak (causal 3D)");
    assert!(tile < decode / 3, "{tile} of {decode}");
}

#[test]
fn model_offload_holds_one_phase_and_empties_the_cache_between_models() {
    let source = |dit: &str, te: &str, extra: &str| {
        format!(
            "model dit {{ params {dit} }}\nmodel te {{ params {te} }}\nmodel ae {{ params 80 million }}\nworkload w {{ runtime none; diffusion {{ denoiser dit; text_encoders te; vae ae; weights bf16; architecture dit; resolution 1024 x 1024; text_tokens 256 tokens; hidden 1536; offload model{extra} }} }}\ncheck w on h100-sxm-80gb"
        )
    };
    let mib = 1 << 20;
    let names = |checks: &[CheckBudget]| -> Vec<String> {
        checks[0].devices[0].components.iter().map(|c| c.name.to_string()).collect()
    };
    // One transformer block over 2 × (4096 + 256) tokens of 1536 (guidance doubles the batch).
    let step = 2 * (4096 + 256) * 1536 * 12 * 2;
    let decode = 1024 * 1024 * 1088 * 2;
    // The decoder alone through the caching allocator (accelerate empties the cache when the
    // transformer leaves, so none of the step's blocks are there): its stages' segments,
    // 112 + 384 + 1,408 + 2,304 MiB at 128², 256², 512² and 1024² (`vae_decode.rs`'s tests).
    let decoder_reserved = (112 + 384 + 1408 + 2304) * mib;
    // The denoiser's phase is the largest, and the decode's reserved bytes stay under it.
    let checks = evaluate(&source("3 billion", "1 billion", ""));
    let used: u64 = checks[0].devices[0].components.iter().map(|c| c.bytes.0).sum();
    assert_eq!(used, 6_000_000_000 + step);
    assert_eq!(names(&checks), ["denoiser weights: dit", "denoiser activations (one block)"]);
    assert!(160_000_000 + decoder_reserved < 6_000_000_000 + step);
    // Small models: the decode is the largest phase, with its own stages cached.
    let checks = evaluate(&source("100 million", "100 million", ""));
    assert_eq!(bytes(&checks[0], 0, "VAE decode peak"), decode);
    assert_eq!(cached(&checks[0], 0), decoder_reserved - decode);
    // A denoiser whose phase holds more allocated bytes than the decode's, fewer than the decode
    // reserves: the cache component carries the difference, so the reserved view is the decode's.
    let checks = evaluate(&source("1_500 million", "100 million", ""));
    assert_eq!(bytes(&checks[0], 0, "denoiser weights"), 3_000_000_000);
    assert!(3_000_000_000 + step > 160_000_000 + decode);
    assert_eq!(cached(&checks[0], 0), 160_000_000 + decoder_reserved - (3_000_000_000 + step));
    let views = &checks[0].devices[0].views;
    assert_eq!(
        views.reserved.0 - views.allocated.0,
        160_000_000 + decoder_reserved - (3_000_000_000 + step)
    );
    // Moved to the device whole before offloading: every model's weights at once.
    let checks = evaluate(&source("2 billion", "1 billion", "; loaded_on_device true"));
    let used: u64 = checks[0].devices[0].components.iter().map(|c| c.bytes.0).sum();
    assert_eq!(used, 4_000_000_000 + 2_000_000_000 + 160_000_000);
    assert!(names(&checks).iter().all(|n| n.contains("weights")), "{:?}", names(&checks));
    // ... unless one phase outweighs them (the decode of small models).
    let checks = evaluate(&source("100 million", "100 million", "; loaded_on_device true"));
    assert_eq!(bytes(&checks[0], 0, "VAE decode peak"), decode);
}

#[test]
fn fp32_rotary_embeddings_add_their_temporaries_to_a_dit_step() {
    // FLUX.1's shape: hidden 3072, 512 text tokens, no guidance batch.
    let source = |extra: &str| {
        format!(
            "model dit {{ params 2 billion }}\nmodel ae {{ params 80 million }}\nworkload w {{ runtime none; diffusion {{ denoiser dit; vae ae; weights bf16; architecture dit; hidden 3072; text_tokens 512 tokens; cfg false{extra} }} }}\ncheck w on h100-sxm-80gb"
        )
    };
    let mib = 1 << 20;
    let components = |checks: &[CheckBudget]| -> Vec<String> {
        checks[0].devices[0].components.iter().map(|c| c.name.to_string()).collect()
    };
    // At 1024²: 4,096 latent patches + 512 text tokens = 4,608 tokens; 27 MiB per hidden-wide
    // bf16 tensor. The step holds 12 of those generically (a sequential block, 324 MiB); with
    // fp32 rotary embeddings FLUX's single-stream block instead, its 10 and the key's rotated
    // copy (27 MiB) and three fp32 tensors (3 × 54 MiB): 34 B per token and hidden unit,
    // 459 MiB, still under the decode's 1,536 MiB.
    let tokens = 4608 * 3072;
    let generic = evaluate(&source("; resolution 1024 x 1024"));
    let rope = evaluate(&source("; resolution 1024 x 1024; rope fp32"));
    assert_eq!(bytes(&generic[0], 0, "VAE decode peak"), 2176 * mib);
    assert_eq!(bytes(&rope[0], 0, "VAE decode peak"), 2176 * mib);
    assert!(components(&rope).iter().all(|n| !n.starts_with("denoiser activations")));
    assert_eq!(generic[0].devices[0].views.allocated, rope[0].devices[0].views.allocated);
    // The reserved view replays the step's tensors before the decode. Each rounds to a segment
    // of its own: generically 4 × 28 + 2 × 108 MiB; the decoder's tensors at 128² fit those
    // blocks, and so do the 64 MiB ones at 256² (one to a 108 MiB block at a time), but not the
    // two 128 MiB convolution workspaces there; 512² adds 1,408 MiB and full resolution 2,304
    // MiB (`vae_decode.rs`'s tests). With the rotation: 7 × 28 + 108 + 3 × 54 = 466 MiB of
    // step segments, and of the upsample's two 64 MiB tensors at 256² only the first fits them
    // (the 108 MiB block), so a 64 MiB segment follows.
    let cache = |checks: &[CheckBudget]| cached(&checks[0], 0);
    let stages = 2 * 128 + 1408 + 2304;
    assert_eq!(cache(&generic), (4 * 28 + 2 * 108 + stages - 2176) * mib);
    assert_eq!(cache(&rope), (7 * 28 + 108 + 3 * 54 + 64 + stages - 2176) * mib);
    // At 2048² with the decode tiled at 768²: 16,384 patches + 512 = 16,896 tokens. The
    // generic step (1.16 GiB) stays under the tile's decode (768² × 1,088 × 2 B, 1.20 GiB);
    // with the fp32 rotation (1.64 GiB) the step is the peak.
    let tokens_2048 = 16_896 * 3072;
    let tiled = "; resolution 2048 x 2048; vae_tiling true; vae_tile 768";
    let generic = evaluate(&source(tiled));
    assert_eq!(bytes(&generic[0], 0, "VAE decode peak"), 768 * 768 * 1088 * 2);
    let rope = evaluate(&source(&format!("{tiled}; rope fp32")));
    assert_eq!(bytes(&rope[0], 0, "denoiser activations (one block)"), tokens_2048 * 20);
    assert_eq!(
        bytes(&rope[0], 0, "denoiser activations (fp32 rotary embedding)"),
        tokens_2048 * 14
    );
    assert!(components(&rope).iter().all(|n| n != "VAE decode peak"));
    // `rope none` is the default; an fp32 denoiser holds 11 × 4 + 12 = 56 B per unit.
    let none = evaluate(&source("; resolution 1024 x 1024; rope none; offload model"));
    assert_eq!(bytes(&none[0], 0, "denoiser activations"), tokens * 24);
    let fp32 = evaluate(&source(
        "; resolution 1024 x 1024; rope fp32; offload model; denoiser_weights fp32",
    ));
    assert_eq!(bytes(&fp32[0], 0, "denoiser activations"), tokens * 56);
}

#[test]
fn an_upcast_vae_decodes_sdxl_in_fp32() {
    // SDXL base 1.0 in fp16 at 1024 × 1024, batch 1, guided: its UNet (2,567.46 M parameters,
    // 320 base channels), its autoencoder (83,653,863 parameters, c = 128); no text encoders,
    // which add the same bytes with and without the upcast.
    let source = |extra: &str| {
        format!(
            "model unet {{ params 2_567.46 million }}\nmodel ae {{ params 83_653_863 }}\nworkload w {{ runtime none; diffusion {{ denoiser unet; vae ae; weights fp16; architecture unet; hidden 320; resolution 1024 x 1024{extra} }} }}\ncheck w on h100-sxm-80gb"
        )
    };
    let mib = 1 << 20;
    let vae = 83_653_863;
    let fp16 = evaluate(&source(""));
    let upcast = evaluate(&source("; vae_upcast true"));
    // The resident VAE stays fp16 (it is cast back after the decode); the decode phase holds the
    // fp32 copy in its place, 2 B more per parameter.
    assert_eq!(bytes(&upcast[0], 0, "VAE weights"), vae * 2);
    assert_eq!(bytes(&upcast[0], 0, "VAE upcast to fp32"), vae * 2);
    // The last upsample's convolution: 17 quarters of a 256-channel tensor at 1024²,
    // 17 / 4 × 256 × 1024² × 2 B = 2,176 MiB in fp16, twice that in fp32.
    assert_eq!(bytes(&fp16[0], 0, "VAE decode peak"), 2176 * mib);
    assert_eq!(bytes(&upcast[0], 0, "VAE decode peak"), 4352 * mib);
    // The UNet's step (2 × 128² positions × 320 channels × 10 × 2 B = 200 MiB) stays under
    // either decode, so the decode is the peak: 2,176 MiB of activations and 2 B per VAE
    // parameter more allocated.
    let components = &fp16[0].devices[0].components;
    assert!(components.iter().all(|c| !c.name.starts_with("denoiser activations")));
    let allocated = |checks: &[CheckBudget]| checks[0].devices[0].views.allocated.0;
    assert_eq!(allocated(&upcast) - allocated(&fp16), 2176 * mib + vae * 2);
    // The reserved view replays the decoder alone (a UNet step's blocks are not replayed): in
    // fp16 its stages' 112 + 384 + 1,408 + 2,304 = 4,208 MiB (`vae_decode.rs`'s tests), twice
    // that in fp32.
    let cache = |checks: &[CheckBudget]| cached(&checks[0], 0);
    assert_eq!(cache(&fp16), (4208 - 2176) * mib);
    assert_eq!(cache(&upcast), (2 * 4208 - 4352) * mib);
    // Model offload: the UNet's phase (5,134.92 MB of weights and its step) is the largest
    // allocated, but the decode reserves more: its fp16 weights, the fp32 copy's extra 2 B per
    // parameter and the 8,416 MiB the decoder's replay reserves.
    let offloaded = evaluate(&source("; vae_upcast true; offload model"));
    let unet_phase = 5_134_920_000 + 200 * mib;
    let decode_reserved = vae * 2 + vae * 2 + 2 * 4208 * mib;
    assert_eq!(cached(&offloaded[0], 0), decode_reserved - unet_phase);
    assert_eq!(offloaded[0].devices[0].views.reserved.0, decode_reserved);
    // Refused beside a training section: the step encodes with the VAE and decodes nothing.
    let trained = vram_core::evaluate(
        "model unet { params 2_567.46 million }\nmodel ae { params 83_653_863 }\nworkload w { runtime diffusers; diffusion { denoiser unet; vae ae; weights fp16; architecture unet; hidden 320; heads 8; channel_mult 1 2 4; layers_per_block 2; cross_attention_dim 2048; resolution 1024 x 1024; vae_upcast true }; training { method lora { rank 4 } } }\ncheck w on h100-sxm-80gb",
    );
    let refusals: Vec<_> = trained.diagnostics.iter().filter(|d| d.code == "E013").collect();
    assert_eq!(refusals.len(), 1, "{:?}", trained.diagnostics);
    assert!(refusals[0].message.contains("vae_upcast"), "{}", refusals[0].message);
}

#[test]
fn encoders_with_biases_layernorm_and_learned_positions() {
    let checks = evaluate(
        "model bert-large { layers 24; hidden 1024; ffn 4096; heads 16; vocab 30522; mlp plain; biases true; norm layernorm; positions 512; output none }\nworkload w { model bert-large; runtime none; inference { weights fp32; context 512 tokens } }\ncheck w on l4",
    );
    // bert-large-uncased has 335,141,888 parameters; the pooler (1,049,600) and the token-type
    // embedding (2,048) are a task head this shape leaves out.
    let shape = vram_core::catalog::builtin().models.get("bert-large").map(|_| ());
    assert!(shape.is_none(), "not a catalog model");
    let weights = bytes(&checks[0], 0, "weights");
    assert_eq!(weights, (335_141_888 - 1_049_600 - 2_048) * 4);
    // No output projection, so no vocabulary logits.
    let peak = checks[0].devices[0]
        .components
        .iter()
        .find(|c| c.name.starts_with("forward-step"))
        .expect("peak");
    assert!(peak.formula.contains("logits 0 rows"), "{}", peak.formula);
}

#[test]
fn eager_module_loading_costs_the_whole_kernel_image() {
    let source = |loading: &str| {
        format!(
            "workload w {{ model llama3.2-1b; cuda_module_loading {loading}; inference {{ weights fp16; context 128 tokens }} }}\ncheck w on v100-sxm2-16gb"
        )
    };
    assert_eq!(bytes(&evaluate(&source("lazy"))[0], 0, "CUDA context"), 500 << 20);
    // HF model_memory_anatomy: 1343 MB (MiB) on a V100 with every kernel loaded.
    assert_eq!(bytes(&evaluate(&source("eager"))[0], 0, "CUDA context"), 1343 << 20);
}

#[test]
fn adafactor_keeps_row_and_column_statistics() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime none; training { weights bf16; optimizer adafactor; sequence 512 tokens } }\ncheck w on h200-sxm",
    );
    // Per layer: q and o (4096 + 4096 each), k and v (4096 + 1024 each), gate, up and down
    // (4096 + 14336 each), and the two norms' 8,192 values; then the embedding and the head
    // (128,256 + 4,096 each) and the final norm. fp32, like the master copy.
    let per_layer = 2 * 8192 + 2 * 5120 + 3 * (4096 + 14336) + 8192;
    let values = 32 * per_layer + 2 * (128_256 + 4096) + 4096;
    assert_eq!(bytes(&checks[0], 0, "optimizer state"), values * 4);
}

#[test]
fn fp16_loads_and_bitsandbytes_keep_keep_in_fp32_parameters_in_fp32() {
    let source = |weights: &str| {
        format!(
            "model t5 {{ params 4_000_000_000; keep_in_fp32 1_000_000_000 }}
model dit {{ params 1_000_000_000 }}
workload w {{ runtime none; diffusion {{ denoiser dit; text_encoders t5; weights bf16; architecture dit; hidden 1024; text_encoder_weights {weights}; resolution 512 x 512 }} }}
check w on l4"
        )
    };
    let checks = evaluate(&source("nf4"));
    // 3 billion parameters in NF4 (4.5 bits each), 1 billion kept in fp32.
    assert_eq!(bytes(&checks[0], 0, "text encoder weights: t5"), 3_000_000_000 * 9 / 16);
    assert_eq!(bytes(&checks[0], 0, "text encoder fp32 layers"), 4_000_000_000);
    // So does bitsandbytes' LLM.int8 loader; torchao's and quanto's int8 convert them.
    let checks = evaluate(&source("int8-bnb"));
    assert_eq!(bytes(&checks[0], 0, "text encoder weights: t5"), 3_000_000_000);
    assert_eq!(bytes(&checks[0], 0, "text encoder fp32 layers"), 4_000_000_000);
    let checks = evaluate(&source("int8"));
    assert_eq!(bytes(&checks[0], 0, "text encoder weights: t5"), 4_000_000_000);
    // An fp16 load keeps them in fp32 too (transformers `use_keep_in_fp32_modules`):
    // 3 billion × 2 B + 1 billion × 4 B.
    let checks = evaluate(&source("fp16"));
    assert_eq!(bytes(&checks[0], 0, "text encoder weights: t5"), 6_000_000_000);
    assert_eq!(bytes(&checks[0], 0, "text encoder fp32 layers"), 4_000_000_000);
    // A bf16 load and a quantizer applied after loading store every parameter alike.
    let checks = evaluate(&source("bf16"));
    assert_eq!(bytes(&checks[0], 0, "text encoder weights"), 8_000_000_000);
    assert!(checks[0].devices[0].components.iter().all(|c| !c.name.contains("fp32 layers")));
    let checks = evaluate(&source("fp8"));
    assert_eq!(bytes(&checks[0], 0, "text encoder weights"), 4_000_000_000);
}

#[test]
fn layerwise_casting_keeps_the_modules_it_skips_16_bit() {
    let source = |weights: &str| {
        format!(
            "model dit {{ params 1_000_000_000; layerwise_skip 300_000_000 }}
workload w {{ runtime none; diffusion {{ denoiser dit; weights bf16; denoiser_weights {weights}; architecture dit; hidden 1024; resolution 512 x 512 }} }}
check w on l4"
        )
    };
    // 700 million cast parameters at 1 B, 300 million skipped ones at 2 B (bf16).
    let checks = evaluate(&source("fp8-layerwise"));
    assert_eq!(bytes(&checks[0], 0, "denoiser weights: dit"), 700_000_000);
    assert_eq!(bytes(&checks[0], 0, "denoiser layers layerwise casting skips: dit"), 600_000_000);
    // A quantizer that converts every linear layer (torchao float8_weight_only) skips nothing.
    let checks = evaluate(&source("fp8"));
    assert_eq!(bytes(&checks[0], 0, "denoiser weights: dit"), 1_000_000_000);
    assert!(checks[0].devices[0].components.iter().all(|c| !c.name.contains("skips")));
}

#[test]
fn quantizers_applied_while_loading_leave_keep_in_fp32_and_non_linear_parameters_16_bit() {
    let source = |base: &str, weights: &str, on_load: bool| {
        format!(
            "model t5 {{ params 4_000_000_000; keep_in_fp32 1_000_000_000; outside_linear 100_000_000 }}
model dit {{ params 1_000_000_000 }}
workload w {{ runtime none; diffusion {{ denoiser dit; text_encoders t5; weights {base}; architecture dit; hidden 1024; text_encoder_weights {weights}; quantize_on_load {on_load}; resolution 512 x 512 }} }}
check w on l4"
        )
    };
    // torchao int8 at load in a bf16 pipeline: 2.9 billion linear parameters at 1 B, the 1
    // billion `wo` parameters unconverted in bf16, the 100 million embedding and norm
    // parameters in bf16.
    let checks = evaluate(&source("bf16", "int8", true));
    assert_eq!(bytes(&checks[0], 0, "text encoder weights: t5"), 2_900_000_000);
    assert_eq!(bytes(&checks[0], 0, "text encoder bf16 layers: t5"), 2_000_000_000);
    assert_eq!(bytes(&checks[0], 0, "text encoder embeddings and norms: t5"), 200_000_000);
    // An fp16 load keeps `wo` in fp32 (transformers' keep-in-fp32 rule for fp16).
    let checks = evaluate(&source("fp16", "int8", true));
    assert_eq!(bytes(&checks[0], 0, "text encoder fp32 layers: t5"), 4_000_000_000);
    // Quantized after loading (optimum-quanto `quantize`): `wo` is converted with the rest,
    // the embedding is still not a linear layer: 3.9 billion × 1 B + 100 million × 2 B.
    let checks = evaluate(&source("bf16", "int8", false));
    assert_eq!(bytes(&checks[0], 0, "text encoder weights: t5"), 3_900_000_000);
    assert_eq!(bytes(&checks[0], 0, "text encoder embeddings and norms: t5"), 200_000_000);
    assert!(checks[0].devices[0].components.iter().all(|c| !c.name.contains("layers: t5")));
    // bitsandbytes NF4: `wo` in fp32 either way, 2.9 billion at 4.5 bits.
    let checks = evaluate(&source("bf16", "nf4", true));
    assert_eq!(bytes(&checks[0], 0, "text encoder weights: t5"), 2_900_000_000 * 9 / 16);
    assert_eq!(bytes(&checks[0], 0, "text encoder fp32 layers: t5"), 4_000_000_000);
    // An unquantized bf16 model stores everything alike.
    let checks = evaluate(&source("bf16", "bf16", true));
    assert_eq!(bytes(&checks[0], 0, "text encoder weights: t5"), 8_000_000_000);
    assert!(checks[0].devices[0].components.iter().all(|c| !c.name.contains("embeddings")));
}

#[test]
fn grouped_int4_counts_its_scales_and_zeros() {
    let checks = evaluate(
        "model dit { params 1_024_000_000 }
workload w { runtime none; diffusion { denoiser dit; weights bf16; denoiser_weights int4-g128; architecture dit; hidden 1024; resolution 512 x 512 } }
check w on l4",
    );
    // 1,024,000,000 × (4 + 32/128) bits / 8 = 1,024,000,000 × 17/32 B.
    assert_eq!(bytes(&checks[0], 0, "denoiser weights: dit"), 544_000_000);
}

#[test]
fn text_encoders_take_a_format_each() {
    let checks = evaluate(
        "model t5 { params 4_000_000_000; keep_in_fp32 1_000_000_000 }
model clip { params 100_000_000 }
model dit { params 1_000_000_000 }
workload w { runtime none; diffusion { denoiser dit; text_encoders t5 clip; weights bf16; text_encoder_weights nf4 bf16; architecture dit; hidden 1024; resolution 512 x 512 } }
check w on l4",
    );
    // T5 in NF4 with its `wo` in fp32; CLIP-L left in bf16.
    assert_eq!(bytes(&checks[0], 0, "text encoder weights: t5"), 3_000_000_000 * 9 / 16);
    assert_eq!(bytes(&checks[0], 0, "text encoder fp32 layers: t5"), 4_000_000_000);
    assert_eq!(bytes(&checks[0], 0, "text encoder weights: clip"), 200_000_000);
}

#[test]
fn the_optimizer_step_counts_only_what_it_needs_beyond_the_backward_pass() {
    let source = |sharding: &str, sequence: u64| {
        format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ weights bf16; sharding {sharding}; micro_batch 1; sequence {sequence} tokens; checkpointing full; zero_grad zeros }} }}\ncheck w on h200-sxm"
        )
    };
    let params: u64 = 8_030_261_248;
    let intermediates = |check: &vram_core::budget::CheckBudget| -> u64 {
        bytes(check, 0, "activations") + bytes(check, 0, "logits and loss")
    };
    // DeepSpeed ZeRO-2 on one rank: 16-bit gradients in the backward pass; at the step, the
    // flat 16-bit copy and its fp32 cast (2 + 4 B per parameter), short activations freed.
    let checks = evaluate(&source("zero2", 128));
    assert_eq!(bytes(&checks[0], 0, "gradients"), params * 2);
    let step = params * 6;
    assert_eq!(bytes(&checks[0], 0, "optimizer step"), step - intermediates(&checks[0]));
    // ZeRO-3 steps one sub-group of at most 1e9 elements at a time.
    let checks = evaluate(&source("zero3", 128));
    assert_eq!(bytes(&checks[0], 0, "optimizer step"), 6_000_000_000 - intermediates(&checks[0]));
    // Long sequences: the backward pass holds more than the step needs, so the step adds nothing.
    let checks = evaluate(&source("zero2", 131_072));
    assert!(checks[0].devices[0].components.iter().all(|c| c.name != "optimizer step"));
    assert!(intermediates(&checks[0]) > step);
}

#[test]
fn pytorch_adamw_steps_with_one_second_moment_sized_temporary() {
    let checks = evaluate(
        "workload w { model llama3.1-8b; runtime none; training { method lora { rank 16; targets all }; weights bf16; sequence 16 tokens; zero_grad zeros } }\ncheck w on a100-sxm4-80gb",
    );
    // 41,943,040 fp32 adapter parameters: one fp32 temporary each (torch foreach AdamW), beyond
    // what the backward pass held.
    let intermediates = bytes(&checks[0], 0, "activations")
        + bytes(&checks[0], 0, "LoRA saved inputs")
        + bytes(&checks[0], 0, "logits and loss");
    assert_eq!(bytes(&checks[0], 0, "optimizer step"), 41_943_040 * 4 - intermediates);
}

#[test]
fn eager_attention_keeps_an_fp32_softmax_and_dropout_its_mask_and_output() {
    let source = |dropout: bool, weights: &str| {
        format!(
            "model enc {{ layers 2; hidden 1024; ffn 4096; heads 16; vocab 30522; mlp plain; dropout {dropout} }}
workload w {{ model enc; runtime none; training {{ weights {weights}; micro_batch 4; sequence 512 tokens; attention eager; foreach false }} }}
check w on l4"
        )
    };
    let scores = 2 * 4 * 16 * 512 * 512;
    // fp32 softmax kept (4 B) and its bf16 copy (2 B).
    let checks = evaluate(&source(false, "bf16"));
    assert_eq!(bytes(&checks[0], 0, "attention scores"), scores * 6);
    // Attention dropout adds its output (2 B) and a one-byte mask.
    let checks = evaluate(&source(true, "bf16"));
    assert_eq!(bytes(&checks[0], 0, "attention scores"), scores * 9);
    // fp32 compute needs no copy: 4 + 4 + 1 B.
    let checks = evaluate(&source(true, "fp32"));
    assert_eq!(bytes(&checks[0], 0, "attention scores"), scores * 9);
    // A per-tensor optimizer step leaves no multi-tensor temporary.
    assert!(checks[0].devices[0].components.iter().all(|c| c.name != "optimizer step"));
}

#[test]
fn eager_attention_backward_holds_two_fp32_score_gradients_and_recomputes_one_layer() {
    let source = |checkpointing: &str| {
        format!(
            "model enc {{ layers 2; hidden 1024; ffn 4096; heads 16; vocab 30522; mlp plain }}
workload w {{ model enc; runtime none; training {{ weights bf16; micro_batch 4; sequence 512 tokens; attention eager; checkpointing {checkpointing} }} }}
check w on l4"
        )
    };
    // micro_batch × heads × queries × keys of one layer.
    let per_layer = 4 * 16 * 512 * 512;
    // Without recomputation every layer keeps its scores (fp32 softmax + bf16 copy, 6 B); one
    // layer's backward adds the probabilities' and the scores' fp32 gradients (2 × 4 B).
    let checks = evaluate(&source("none"));
    assert_eq!(bytes(&checks[0], 0, "attention scores"), 2 * per_layer * 6);
    assert_eq!(bytes(&checks[0], 0, "eager attention backward"), 2 * per_layer * 4);
    // Recomputation materializes the scores of the one layer it recomputes, then the same
    // gradients.
    for mode in ["selective", "full"] {
        let checks = evaluate(&source(mode));
        assert_eq!(bytes(&checks[0], 0, "attention scores"), per_layer * 6, "{mode}");
        assert_eq!(bytes(&checks[0], 0, "eager attention backward"), 2 * per_layer * 4, "{mode}");
    }
}

#[test]
fn dropout_masks_add_two_bytes_of_hidden_per_token_and_layer() {
    let source = |dropout: bool| {
        format!(
            "model enc {{ layers 2; hidden 1024; ffn 4096; heads 16; vocab 30522; mlp plain; dropout {dropout} }}
workload w {{ model enc; runtime none; training {{ weights fp32; micro_batch 1; sequence 512 tokens }} }}
check w on l4"
        )
    };
    let without = bytes(&evaluate(&source(false))[0], 0, "activations");
    let with = bytes(&evaluate(&source(true))[0], 0, "activations");
    assert_eq!(with - without, 2 * 512 * 2 * 1024);
}

#[test]
fn the_diffusers_profile_is_pytorchs_context_and_workspaces() {
    let source = |runtime: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime {runtime}; inference {{ weights bf16; context 1024 tokens }} }}\ncheck w on h100-sxm-80gb"
        )
    };
    let names = |runtime: &str| -> Vec<(String, u64)> {
        evaluate(&source(runtime))[0].devices[0]
            .components
            .iter()
            .filter(|c| c.category == vram_core::budget::Category::Workspace)
            .map(|c| (c.name.to_string(), c.bytes.0))
            .collect()
    };
    assert_eq!(names("diffusers"), names("pytorch"));
    assert!(names("diffusers").iter().any(|(name, _)| name == "CUDA context and kernels"));
}

#[test]
fn a_gptq_base_keeps_its_dequantized_fp16_matrices_for_the_backward_pass() {
    let source = |sequence: u64, checkpointing: &str| {
        format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ method lora {{ rank 16; targets all }}; weights gptq-int4; micro_batch 1; sequence {sequence} tokens; checkpointing {checkpointing} }} }}\ncheck w on a100-sxm4-80gb"
        )
    };
    let name = "dequantized GPTQ matrices";
    // Llama 3.1 8B, per layer: q and o 4096 × 4096, k and v 4096 × 1024, gate, up and down
    // 4096 × 14336 = 218,103,808 parameters, 2 B each in fp16.
    let per_layer: u64 = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336;
    assert_eq!(per_layer, 218_103_808);
    // Full checkpointing: only the recomputed layer's matrices are alive.
    assert_eq!(bytes(&evaluate(&source(512, "full"))[0], 0, name), per_layer * 2);
    // Without it, every layer's stay until its backward pass.
    assert_eq!(bytes(&evaluate(&source(512, "none"))[0], 0, name), 32 * per_layer * 2);
    // Under 128 rows AutoGPTQ multiplies in its fused kernel and saves nothing.
    let short = evaluate(&source(64, "full"));
    assert!(short[0].devices[0].components.iter().all(|c| !c.name.starts_with(name)));
}

#[test]
fn a_setting_that_needs_another_warns_and_changes_nothing() {
    let source = |extra: &str| {
        format!(
            "model dit {{ params 2 billion }}\nmodel te {{ params 1 billion }}\nmodel ae {{ params 80 million }}\nworkload w {{ runtime none; diffusion {{ denoiser dit; text_encoders te; vae ae; weights bf16; architecture dit; resolution 1024 x 1024; hidden 1536{extra} }} }}\ncheck w on h100-sxm-80gb"
        )
    };
    let plain = vram_core::evaluate(&source(""));
    // diffusers upcasts only an fp16 VAE: `vae_upcast` beside this bf16 one does nothing.
    for (extra, key) in [
        ("; loaded_on_device true", "loaded_on_device"),
        ("; vae_tile 512", "vae_tile"),
        ("; vae_upcast true", "vae_upcast"),
        ("; vae_temporal 8", "vae_temporal"),
        ("; vae_cache replaced", "vae_cache"),
    ] {
        let outcome = vram_core::evaluate(&source(extra));
        let warnings: Vec<_> = outcome.diagnostics.iter().filter(|d| d.code == "W005").collect();
        assert_eq!(warnings.len(), 1, "{extra}: {:?}", outcome.diagnostics);
        assert!(warnings[0].message.contains(key), "{}", warnings[0].message);
        assert_eq!(outcome.budget.checks, plain.budget.checks, "{extra} changes nothing");
    }
    // Beside what it needs, it is no warning.
    let outcome = vram_core::evaluate(&source("; offload model; loaded_on_device true"));
    assert!(outcome.diagnostics.iter().all(|d| d.code != "W005"), "{:?}", outcome.diagnostics);
}

#[test]
fn eager_rms_norms_keep_an_fp32_copy_and_the_trained_weight_s_input() {
    let activations = |training: &str| {
        let source = format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ micro_batch 2; sequence 1024 tokens; {training} }} }}\ncheck w on h200-sxm"
        );
        bytes(&evaluate(&source)[0], 0, "activations")
    };
    // 32 layers × 2,048 tokens × 2 norms × 4,096; compiled layers fuse the norm and keep only
    // the input and output counted for every model.
    let norms = 32 * 2048 * 2 * 4096;
    // bf16 full fine-tuning: the fp32 copy (2 B beyond the bf16 input) and the normalized bf16
    // tensor the weight's gradient needs (2 B).
    let full = "weights bf16";
    assert_eq!(activations(full) - activations(&format!("{full}; compile true")), norms * (2 + 2));
    // LoRA freezes the norm weights: only the fp32 copy.
    let lora = "weights bf16; method lora { rank 8 }";
    assert_eq!(activations(lora) - activations(&format!("{lora}; compile true")), norms * 2);
    // An fp32 stream computes the norm in its own type: only the normalized fp32 tensor.
    let fp32 = "weights fp32";
    assert_eq!(activations(fp32) - activations(&format!("{fp32}; compile true")), norms * 4);
}

#[test]
fn deepspeed_accumulation_holds_the_next_micro_batch_s_gradient_partition() {
    let check = |training: &str| {
        let source = format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ weights bf16; sequence 512 tokens; {training} }} }}\ncheck w on 2 x a100-sxm4-80gb split data 2"
        );
        evaluate(&source).remove(0)
    };
    let name = "ZeRO gradient partition of the next micro-batch";
    let has = |c: &CheckBudget| c.devices[0].components.iter().any(|c| c.name.starts_with(name));
    // DeepSpeed keeps bf16 gradients: 8,030,261,248 × 2 B over 2 data ranks, for ZeRO-2 and
    // ZeRO-1 alike (ZeRO-1 keeps views of its partition of the full gradients).
    for stage in ["zero2", "zero1"] {
        let accumulating = check(&format!("sharding {stage}; gradient_accumulation 4"));
        assert_eq!(bytes(&accumulating, 0, name), 8_030_261_248 * 2 / 2, "{stage}");
    }
    // One micro-batch per step, ZeRO-3's flat buffer, FSDP and offloaded gradients: none.
    assert!(!has(&check("sharding zero2")));
    assert!(!has(&check("sharding zero3; gradient_accumulation 4")));
    assert!(!has(&check("sharding fsdp-grad-op; gradient_accumulation 4")));
    assert!(!has(&check("sharding zero2; offload optimizer; gradient_accumulation 4")));
}

#[test]
fn paged_optimizer_states_are_outside_the_allocator() {
    let check = |extra: &str| {
        evaluate(&format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ method lora {{ rank 16; targets all }}; weights nf4; optimizer adamw-8bit; sequence 512 tokens{extra} }} }}\ncheck w on h200-sxm"
        ))
        .remove(0)
    };
    let plain = check("");
    let paged = check("; paged_optimizer true");
    let states = bytes(&paged, 0, "adapter optimizer state");
    assert_eq!(states, bytes(&plain, 0, "adapter optimizer state"));
    // Same bytes on the device, but PyTorch's counters never see them.
    let views = |c: &CheckBudget| c.devices[0].views;
    assert_eq!(views(&plain).allocated.0 - views(&paged).allocated.0, states);
    assert_eq!(views(&plain).reserved.0 - views(&paged).reserved.0, states);
    assert_eq!(views(&plain).device, views(&paged).device);
}

#[test]
fn a_paged_adamw_steps_without_foreach_temporaries() {
    // bitsandbytes' PagedAdamW32bit steps each tensor with one fused kernel: the step holds the
    // adapters' fp32 gradients alone, not PyTorch's foreach square root beside them.
    let check = |extra: &str| {
        evaluate(&format!(
            "workload w {{ model llama3.1-8b; runtime none; training {{ method lora {{ rank 16; targets all }}; weights bf16; sequence 16 tokens{extra} }} }}\ncheck w on h200-sxm"
        ))
        .remove(0)
    };
    let foreach = check("");
    let paged = check("; paged_optimizer true");
    let adapters = bytes(&foreach, 0, "LoRA adapters");
    // 41,943,040 fp32 adapter values: 4 B each of gradient, and 4 B of foreach square root.
    let passes = |c: &CheckBudget| {
        c.devices[0]
            .components
            .iter()
            .filter(|c| c.category == vram_core::budget::Category::Intermediate)
            .filter(|c| !c.name.starts_with("gradients"))
            .map(|c| c.bytes.0)
            .sum::<u64>()
    };
    assert_eq!(bytes(&foreach, 0, "gradients and optimizer step"), 2 * adapters - passes(&foreach));
    assert_eq!(bytes(&paged, 0, "gradients (freed each step)"), adapters - passes(&paged));
}

#[test]
fn a_trained_head_run_in_chunks_adds_one_chunk_s_gradient_contribution_to_the_loss() {
    let source = |method: &str| {
        format!(
            "workload w {{ model llama3.2-3b; runtime none; training {{ {method}; weights bf16; master none; gradients bf16; micro_batch 2; sequence 1024 tokens; loss_chunks 8 }} }}\ncheck w on h200-sxm"
        )
    };
    let loss = |method: &str| bytes(&evaluate(&source(method))[0], 0, "logits and loss");
    // The frozen head of LoRA: the chunked loss alone. Trained in full, its tied head also gets
    // each chunk's weight gradient, 128,256 × 3,072 × 2 B (bf16), summed into the gradient it
    // holds: one such contribution beside the loss.
    let frozen = loss("method lora { rank 8; targets q v }");
    let contribution = 128_256 * 3_072 * 2;
    assert_eq!(loss("method full"), frozen + contribution);
    // The tied head trains with the embedding PEFT trains whole (`modules_to_save`).
    assert_eq!(
        loss("method lora { rank 8; targets q v; modules_to_save embeddings }"),
        frozen + contribution
    );
    // Unchunked, the head's backward runs once: nothing is summed.
    let whole = |method: &str| {
        bytes(
            &evaluate(&source(method).replace("loss_chunks 8", "loss_chunks 1"))[0],
            0,
            "logits and loss",
        )
    };
    assert_eq!(whole("method full"), whole("method lora { rank 8; targets q v }"));
}

#[test]
fn prompt_logits_are_cast_to_fp32_beside_their_16_bit_output() {
    // transformers before 4.45 returns the logits of every prompt position and upcasts them
    // (`logits = logits.float()`): the bf16 head output and its fp32 copy, 6 B per logit.
    let source = |weights: &str, split: &str| {
        format!(
            "workload w {{ model qwen2.5-7b; runtime pytorch; inference {{ weights {weights}; context 4096 tokens; logits all }} }}\ncheck w on {split}"
        )
    };
    let step = |s: String, device: usize| bytes(&evaluate(&s)[0], device, "forward-step peak");
    let logits = 4096 * 152_064;
    assert_eq!(step(source("bf16", "h200-sxm"), 0), logits * 6);
    // Computed in fp32, there is nothing to cast.
    assert_eq!(step(source("fp32", "h200-sxm"), 0), logits * 4);
    // Split over two GPUs by accelerate, the outputs come back to the first: its step holds the
    // fp32 copy of the logits (more than its layers' MLP, 3 × 4,096 × 18,944 × 2 B).
    let split = source("bf16", "2 x h200-sxm split pipeline 2");
    assert_eq!(step(split.clone(), 1), logits * 6);
    assert_eq!(step(split, 0), logits * 4);
    // Another runtime keeps them where the head ran.
    let tgi = source("bf16", "2 x h200-sxm split pipeline 2").replace("pytorch", "tgi");
    assert!(step(tgi, 0) < logits * 4);
}

#[test]
fn a_growing_cache_meets_the_prefill_with_the_prompts_keys_and_values_only() {
    // transformers' DynamicCache: 30,720 prompt tokens, 2,048 generated. At the prefill the
    // cache holds the prompt's KV; the generated tokens' KV (and the copy one layer's growth
    // makes) arrive after the prefill's intermediates are gone, so those count only beyond it.
    let source = |prefill: u64| {
        format!(
            "workload w {{ model qwen2.5-7b; runtime pytorch; inference {{ weights bf16; context 32768 tokens; prefill_chunk {prefill} tokens }} }}\ncheck w on h200-sxm"
        )
    };
    let check = &evaluate(&source(30_720))[0];
    let per_token = 28 * 4 * 128 * 2 * 2;
    let copy = bytes(check, 0, "KV cache: previous copy while growing");
    // `bytes` sums the components whose names start so: the cache and its copy.
    assert_eq!(bytes(check, 0, "KV cache") - copy, 32_768 * per_token);
    assert_eq!(copy, 32_768 * per_token / 28);
    // The MLP's gate, up and product over the prompt, less the generated tokens' KV and the copy.
    let mlp = 3 * 30_720 * 18_944 * 2;
    assert_eq!(bytes(check, 0, "forward-step peak"), mlp - (2_048 * per_token + copy));
    // Around each layer transformers keeps four hidden-sized tensors: the input embeddings (the
    // model's `inputs_embeds`) and the layer's input (the layer loop's variable), the residual
    // and the normed input.
    let hidden = 4 * 30_720 * 3_584 * 2;
    assert_eq!(bytes(check, 0, "hidden states"), hidden);
    // A later pipeline stage has no embeddings; another runtime takes the stream in place.
    let staged = source(30_720).replace("on h200-sxm", "on 2 x h200-sxm split pipeline 2");
    assert_eq!(bytes(&evaluate(&staged)[0], 1, "hidden states"), 3 * 30_720 * 3_584 * 2);
    let tgi = source(30_720).replace("runtime pytorch", "runtime tgi");
    let tgi = &evaluate(&tgi)[0];
    assert_eq!(bytes(tgi, 0, "hidden states"), 2 * 30_720 * 3_584 * 2);
    // TGI's warm-up asks for every prompt token's log-probabilities, taken in place over the
    // head's bf16 output: 30,720 rows of 152,064 logits, the step's peak beside the MLP's.
    let logprobs: u64 = 30_720 * 152_064 * 2;
    assert_eq!(bytes(tgi, 0, "forward-step peak"), logprobs.max(3 * 30_720 * 18_944 * 2));
    // A prompt that is the whole context generates nothing: its step keeps every byte.
    let whole = &evaluate(&source(32_768))[0];
    assert_eq!(bytes(whole, 0, "forward-step peak"), 3 * 32_768 * 18_944 * 2);
}
