//! Encoder-decoder models (T5, mT5, T0), pinned to counts computed by hand from the structure of
//! transformers `modeling_t5.py` and to published parameter counts.

use vram_core::budget::CheckBudget;

/// Shapes from the configurations of the original checkpoints (google-research/t5x
/// `t5x/examples/t5/t5_1_0/3B.gin`, `t5_1_1/xl.gin`, `mt5/xxl.gin`); google-t5/t5-3b's
/// config.json gives the same (d_model 1024, d_kv 128, d_ff 16384, num_heads 32, num_layers 24,
/// relative_attention_num_buckets 32).
const MODELS: &str = "
model t5-3b {
  encoder_layers 24
  decoder_layers 24
  hidden 1024
  ffn 16384
  heads 32
  head_dim 128
  vocab 32128
  mlp plain
  tied_embeddings true
  relative_buckets 32
  dropout true
}
model t5-v1.1-xl {
  encoder_layers 24
  decoder_layers 24
  hidden 2048
  ffn 5120
  heads 32
  head_dim 64
  vocab 32128
  relative_buckets 32
  dropout true
}
model mt5-xxl {
  encoder_layers 24
  decoder_layers 24
  hidden 4096
  ffn 10240
  heads 64
  head_dim 64
  vocab 250112
  relative_buckets 32
  dropout true
}
";

/// Bytes of an fp16 element.
const FP16: u64 = 2;

fn evaluate(source: &str) -> Vec<CheckBudget> {
    let source = format!("{MODELS}{source}");
    let outcome = vram_core::evaluate(&source);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks
}

fn codes(source: &str) -> Vec<String> {
    let source = format!("{MODELS}{source}");
    vram_core::evaluate(&source).diagnostics.iter().map(|d| d.code.to_string()).collect()
}

fn shape(name: &str) -> vram_core::hir::Shape {
    let (file, _) = vram_core::syntax::parse(MODELS);
    let (program, diagnostics) =
        vram_core::check::check(&file, vram_core::catalog::builtin(), false);
    assert!(diagnostics.iter().all(|d| !d.is_error()), "{diagnostics:#?}");
    program.model(name).and_then(|m| m.shape.clone()).expect("a shape")
}

/// Bytes of every component whose name starts with `prefix` on the first device.
fn bytes(check: &CheckBudget, prefix: &str) -> u64 {
    let found: Vec<u64> = check.devices[0]
        .components
        .iter()
        .filter(|c| c.name.starts_with(prefix))
        .map(|c| c.bytes.0)
        .collect();
    assert!(!found.is_empty(), "no {prefix:?} in {:#?}", check.devices[0].components);
    found.iter().sum()
}

#[test]
fn t5_3b_parameters_by_hand() {
    // Encoder layer: q, k, v, o of 1024 × (32 × 128), wi and wo of 1024 × 16384, two norms.
    let attention = 4 * 1024 * 4096;
    let encoder_layer = attention + 2 * 1024 * 16384 + 2 * 1024;
    // Decoder layer: self- and cross-attention, the MLP, three norms.
    let decoder_layer = 2 * attention + 2 * 1024 * 16384 + 3 * 1024;
    // A 32-bucket relative-position table per stack; one shared embedding (tied head); a final
    // norm per stack.
    let total = 24 * encoder_layer + 24 * decoder_layer + 2 * 32 * 32 + 32128 * 1024 + 2 * 1024;
    assert_eq!(total, 2_851_598_336);
    assert_eq!(vram_core::eval::parameter_count(&shape("t5-3b")), Some(total));
}

#[test]
fn published_parameter_counts() {
    // t5-3b "~2.85 B"; T5 v1.1 XL (T0_3B, flan-t5-xl) 2.85 B; mT5-XXL "13 B" (12.9 B).
    let t5_v11_xl = vram_core::eval::parameter_count(&shape("t5-v1.1-xl")).unwrap();
    assert_eq!(t5_v11_xl, 2_849_757_184);
    let mt5_xxl = vram_core::eval::parameter_count(&shape("mt5-xxl")).unwrap();
    assert_eq!(mt5_xxl, 12_921_057_280);
}

const INFERENCE: &str = "
workload translate {
  model t5-3b
  inference {
    weights bf16
    source  512 tokens
    context 128 tokens
  }
}
check translate on h100-sxm-80gb
";

#[test]
fn inference_caches_the_decoder_and_the_cross_attention_once() {
    let checks = evaluate(INFERENCE);
    let check = &checks[0];
    assert_eq!(bytes(check, "weights"), 2_851_598_336 * 2);
    // Decoder self-attention: 2 × 24 decoder layers × 32 heads × 128 × 128 tokens × 2 B; the
    // encoder's layers cache nothing. transformers' DynamicCache copies one decoder layer's
    // cache as it grows.
    let cache = 2 * 24 * 32 * 128 * 128 * 2;
    assert_eq!(bytes(check, "KV cache: previous copy"), cache / 24);
    assert_eq!(bytes(check, "KV cache"), cache + cache / 24);
    // Cross-attention K/V over the 512 source tokens, computed once.
    assert_eq!(bytes(check, "cross-attention K/V"), 2 * 24 * 32 * 128 * 512 * 2);
    assert_eq!(bytes(check, "encoder output"), 512 * 1024 * 2);
    // The step's hidden states are the encoder pass over the source: transformers keeps the
    // input embeddings and each block's input beside its residual and normed input.
    assert_eq!(bytes(check, "hidden states"), 4 * 512 * 1024 * 2);
}

#[test]
fn inference_needs_the_source_length_and_a_decoder_only_model_refuses_it() {
    let missing = "
workload w {
  model t5-3b
  inference { weights bf16
    context 128 tokens }
}
check w on h100-sxm-80gb
";
    assert!(codes(missing).contains(&"E011".to_string()));
    let refused = "
workload w {
  model llama3.1-8b
  inference { weights bf16
    context 128 tokens
    source 512 tokens }
}
check w on h100-sxm-80gb
";
    assert!(codes(refused).contains(&"E014".to_string()));
    // A model with its own error is reported once: its workload's `source` is not blamed.
    let broken = "
model broken {
  encoder_layers 24
  hidden 1024
  ffn 4096
  heads 16
  vocab 32128
}
workload w {
  model broken
  inference { weights bf16
    context 128 tokens
    source 512 tokens }
}
check w on h100-sxm-80gb
";
    assert_eq!(codes(broken), ["E011"]);
}

fn training(extra: &str) -> String {
    format!(
        "
workload tune {{
  model t5-3b
  training {{
    weights fp32
    activations fp16
    micro_batch 2
    source 256 tokens
    sequence 64 tokens
    {extra}
  }}
}}
check tune on a100-sxm4-80gb
"
    )
}

#[test]
fn training_stores_both_stacks_at_their_own_lengths() {
    // With a fused kernel (a model of T5's shape that some runtime computes fused).
    let checks = evaluate(&training("attention fused"));
    // Per token, an fp16 layer stores 4h + 2(heads + kv_heads) head_dim + 2 ffn (plain MLP)
    // elements, plus 4 B per head of softmax statistics and two 1 B dropout masks of h:
    // (4 × 1024 + 4 × 32 × 128 + 2 × 16384) + (4 × 32 + 2 × 1024) / 2 = 53,248 + 1,088.
    // T5's two RMS norms per layer compute in fp32 (a copy of each input, 2 B beyond the fp16
    // input) and, their weights trained, keep the normalized tensor: 4h more.
    let layer = 4 * 1024 + 4 * 32 * 128 + 2 * 16384 + (4 * 32 + 2 * 1024) / FP16 + 4 * 1024;
    // The cross-attention, per target token: norm in and out (2h), queries and output
    // (2 × heads × head_dim), softmax statistics and a dropout mask of h, in 2 B elements; its
    // RMS norm's fp32 input copy and normalized tensor as the layer's own: 2h more.
    let cross = 2 * 1024 + 2 * 32 * 128 + (4 * 32 + 1024) / FP16 + 2 * 1024;
    // Per source token and decoder layer: the cross-attention's keys and values.
    let kv = 2 * 32 * 128;
    let expected =
        24 * 256 * 2 * layer + 24 * 64 * 2 * (layer + cross) + 24 * 256 * 2 * kv + 256 * 2 * 1024;
    assert_eq!(bytes(&checks[0], "activations"), expected * FP16);
    // The loss over the target tokens: 64 × 2 × 32128 logits, 12 B each.
    assert_eq!(bytes(&checks[0], "logits and loss"), 64 * 2 * 32128 * 12);
}

#[test]
fn a_t5_model_under_transformers_computes_attention_eagerly_unless_told_otherwise() {
    let component_names = |extra: &str| -> Vec<String> {
        evaluate(&training(extra))[0].devices[0]
            .components
            .iter()
            .map(|c| c.name.to_string())
            .collect()
    };
    // Unwritten, the attention is eager (T5Attention has no fused path): as written out.
    assert_eq!(component_names(""), component_names("attention eager"));
    assert_ne!(component_names(""), component_names("attention fused"));
    let bytes_of = |source: &str| -> Vec<u64> {
        evaluate(source)[0].devices[0].components.iter().map(|c| c.bytes.0).collect()
    };
    let inference = |extra: &str| {
        format!(
            "workload chat {{ model t5-3b\n inference {{ weights fp16\n source 512 tokens\n context 64 tokens\n sessions 4\n {extra} }} }}\ncheck chat on a100-sxm4-80gb\n"
        )
    };
    assert_eq!(bytes_of(&inference("")), bytes_of(&inference("attention eager")));
    assert_ne!(bytes_of(&inference("")), bytes_of(&inference("attention fused")));
    // A model without relative positions (BART's learned ones) keeps the fused default.
    let bart = |extra: &str| {
        format!(
            "model bart {{ encoder_layers 12\n decoder_layers 12\n hidden 1024\n ffn 4096\n heads 16\n vocab 50265\n mlp plain\n biases true\n norm layernorm\n positions 1026 }}\nworkload tune {{ model bart\n training {{ weights fp32\n micro_batch 2\n source 256 tokens\n sequence 64 tokens\n {extra} }} }}\ncheck tune on a100-sxm4-80gb\n"
        )
    };
    assert_eq!(bytes_of(&bart("")), bytes_of(&bart("attention fused")));
    assert_ne!(bytes_of(&bart("")), bytes_of(&bart("attention eager")));
}

#[test]
fn eager_training_keeps_every_attention_s_scores() {
    let checks = evaluate(&training("attention eager"));
    // fp32 softmax + its fp16 copy + dropout output and mask: 4 + 2 + 2 + 1 B per score.
    let per_head = 24 * 256 * 256 + 24 * (64 * 64 + 64 * 256);
    assert_eq!(bytes(&checks[0], "attention scores"), 2 * 32 * per_head * 9);
    // The backward of the largest attention, the encoder's 256 × 256.
    assert_eq!(bytes(&checks[0], "eager attention backward"), 2 * 2 * 32 * 256 * 256 * 4);
}

/// T5 v1.1 XL under LoRA of rank 8 on `targets`, 128 source and 32 target tokens.
fn t5_lora(targets: &str) -> String {
    "
workload tune {
  model t5-v1.1-xl
  training {
    method lora {
      rank 8
      targets TARGETS
    }
    weights fp32
    micro_batch 1
    source 128 tokens
    sequence 32 tokens
  }
}
check tune on a100-sxm4-80gb
"
    .replace("TARGETS", targets)
}

#[test]
fn lora_adapts_self_and_cross_attention() {
    let checks = evaluate(&t5_lora("q v"));
    // q and v (2048 → 2048) in 24 encoder layers and twice in 24 decoder layers: 72 layers
    // of 2 × 8 × (2048 + 2048) fp32 parameters, each with fp32 gradients and two AdamW states.
    let adapters: u64 = 72 * 2 * 8 * (2048 + 2048);
    assert_eq!(bytes(&checks[0], "LoRA adapters"), adapters * 4);
}

#[test]
fn t5_module_names_name_the_mlp_targets() {
    let a = evaluate(&t5_lora("wi_0 wi_1 wo"));
    let b = evaluate(&t5_lora("gate up down"));
    assert_eq!(bytes(&a[0], "LoRA adapters"), bytes(&b[0], "LoRA adapters"));
    // 48 layers × (2 × 8 × (2048 + 5120) + 8 × (5120 + 2048)) fp32 parameters.
    assert_eq!(bytes(&a[0], "LoRA adapters"), 48 * 3 * 8 * (2048 + 5120) * 4);
}

#[test]
fn bart_large_cnn_parameters_by_hand() {
    // facebook/bart-large-cnn's config.json (quoted verbatim in a public repository's test, code
    // index id 31223771938): d_model 1024, encoder/decoder_ffn_dim 4096, 12 + 12 layers, 16
    // heads, vocab_size 50264, max_position_embeddings 1024 (BartLearnedPositionalEmbedding adds
    // an offset of 2 rows), GELU MLP, biases, LayerNorm, a tied head.
    let bart = "
model bart-large-cnn {
  encoder_layers  12
  decoder_layers  12
  hidden          1024
  ffn             4096
  heads           16
  vocab           50264
  positions       1026
  mlp             plain
  biases          true
  norm            layernorm
  tied_embeddings true
}
";
    let (file, _) = vram_core::syntax::parse(bart);
    let (program, diagnostics) =
        vram_core::check::check(&file, vram_core::catalog::builtin(), false);
    assert!(diagnostics.is_empty(), "{diagnostics:#?}");
    let shape = program.model("bart-large-cnn").and_then(|m| m.shape.clone()).expect("a shape");
    // Encoder layer: q, k, v, o with biases; fc1, fc2 with biases; two LayerNorms.
    let encoder_layer =
        4 * (1024 * 1024 + 1024) + (1024 * 4096 + 4096) + (4096 * 1024 + 1024) + 2 * 2 * 1024;
    // Decoder layer: and the cross-attention with its biases and LayerNorm.
    let decoder_layer = encoder_layer + 4 * (1024 * 1024 + 1024) + 2 * 1024;
    // The shared embedding, a position table per stack, layernorm_embedding per stack.
    let total =
        12 * encoder_layer + 12 * decoder_layer + 50264 * 1024 + 2 * 1026 * 1024 + 2 * 2 * 1024;
    // facebook/bart-large (vocab 50265) has 406,291,456 parameters; one row fewer here.
    assert_eq!(total, 406_291_456 - 1024);
    assert_eq!(vram_core::eval::parameter_count(&shape), Some(total));
}

#[test]
fn a_pipeline_puts_the_encoder_first_and_only_the_decoder_caches() {
    let checks = evaluate(
        "
workload translate {
  model t5-3b
  inference {
    weights bf16
    source  512 tokens
    context 128 tokens
  }
}
check translate on 2 x h100-sxm-80gb split pipeline 2
check translate on 2 x h100-sxm-80gb split tensor 2
",
    );
    let pipeline = &checks[0];
    let names = |device: usize| -> Vec<&str> {
        pipeline.devices[device].components.iter().map(|c| &*c.name).collect()
    };
    // The first stage holds the 24 encoder layers: its KV cache is empty and it keeps no
    // cross-attention keys and values; the second holds the decoder's.
    let empty = pipeline.devices[0].components.iter().find(|c| c.name == "KV cache");
    assert_eq!(empty.map(|c| c.bytes.0), Some(0));
    assert!(!names(0).iter().any(|n| n.starts_with("cross-attention")), "{:?}", names(0));
    assert_eq!(
        pipeline.devices[1].components.iter().find(|c| c.name == "KV cache").map(|c| c.bytes.0),
        Some(2 * 24 * 32 * 128 * 128 * 2)
    );
    // Tensor parallelism halves the heads, so each rank caches half.
    let tensor = &checks[1];
    assert_eq!(bytes(tensor, "cross-attention K/V"), 24 * 32 * 128 * 512 * 2);
    // The two ranks' weights together hold the model (the shared embedding sharded by rows).
    let weights = |device: usize| -> u64 {
        tensor.devices[device]
            .components
            .iter()
            .filter(|c| c.name.starts_with("weights"))
            .map(|c| c.bytes.0)
            .sum()
    };
    assert!(weights(0) + weights(1) >= 2_851_598_336 * 2);
}

/// transformers keeps T5's `wo` in fp32 under an fp16 load and under bitsandbytes
/// (`T5PreTrainedModel._keep_in_fp32_modules = ["wo"]`): 48 layers × d_model 2048 × d_ff 5120
/// for T5 1.1 XL.
#[test]
fn kept_fp32_layers_follow_the_load_type() {
    const KEPT: u64 = 48 * 2048 * 5120;
    let source = |weights: &str, target: &str| {
        format!(
            "model xl-kept {{\n  encoder_layers 24\n  decoder_layers 24\n  hidden 2048\n  ffn 5120\n  heads 32\n  head_dim 64\n  vocab 32128\n  relative_buckets 32\n  keep_in_fp32 {KEPT}\n}}\nworkload w {{\n  model xl-kept\n  inference {{\n    weights {weights}\n    source 512 tokens\n    context 64 tokens\n  }}\n}}\ncheck w on {target}\n"
        )
    };
    let weights = |weights: &str, target: &str| {
        let outcome = vram_core::evaluate(&source(weights, target));
        assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
        let check = &outcome.budget.checks[0];
        let kept = check.devices[0]
            .components
            .iter()
            .find(|c| c.name.ends_with("layers kept in fp32"))
            .map(|c| c.bytes.0);
        (bytes(check, "weights"), kept)
    };
    let all = 2_849_757_184;
    // A bf16 load converts every layer alike.
    assert_eq!(weights("bf16", "h100-sxm-80gb"), (all * 2, None));
    // An fp16 load keeps `wo` in fp32: 2 B more per kept parameter.
    assert_eq!(weights("fp16", "h100-sxm-80gb"), (all * 2 + KEPT * 2, Some(KEPT * 4)));
    // Under tensor parallelism each device keeps its half of every `wo`.
    let (_, split) = weights("fp16", "2 x h100-sxm-80gb split tensor 2");
    assert_eq!(split, Some(KEPT / 2 * 4));
    // bitsandbytes' NF4 quantizes the other layer matrices and leaves `wo` in fp32.
    let (nf4, kept) = weights("nf4", "h100-sxm-80gb");
    assert_eq!(kept, Some(KEPT * 4));
    let without = source("nf4", "h100-sxm-80gb").replace(&format!("  keep_in_fp32 {KEPT}\n"), "");
    let nf4_all = bytes(&vram_core::evaluate(&without).budget.checks[0], "weights");
    // The kept parameters cost their 4 B instead of NF4's half byte and block scales.
    assert!(nf4 > nf4_all && nf4 - nf4_all < KEPT * 4, "{nf4} against {nf4_all}");
}
