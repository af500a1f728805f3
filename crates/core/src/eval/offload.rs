//! llama.cpp's partial offload (`-ngl N`, Ollama's `num_gpu`; `--n-cpu-moe N` for a mixture of
//! experts): which layers the devices hold, what stays in host memory, and the weight copies its
//! scheduler makes to run a host-held layer's large products on the device.
//!
//! llama.cpp puts the last `N` repeating layers on the devices (`i_gpu_start = n_layer - N` in
//! `llama_model::load_tensors`) and the output layer (head and final norm) with them only when
//! `N` exceeds the layers, which is why Ollama reports "33/33 layers" for a 32-layer model. The
//! token embedding stays in host memory whatever `N` is. Each layer's KV cache sits with its
//! layer (`offload_kqv`, on by default). `--n-cpu-moe N` keeps the routed experts of the first
//! `N` layers (`blk.i.ffn_{gate,up,down}_exps`, one tensor each over every expert) in host
//! memory and the rest of those layers (attention, router, shared experts, norms) with them.
//!
//! A host-held layer still runs its matrix products on the first device for a batch of 32
//! tokens or more (`ggml_backend_sched`'s op offload, asked of the CUDA backend by
//! `offload_op`: `get_op_batch_size(op) >= 32`): the scheduler copies the weight into the
//! device's compute buffer and starts a new split at the next host weight so that the copy's
//! memory is reused. The compute buffer is reserved for the worst-case batch, so it holds the
//! largest such copy beside that product's tensors, and, when the output layer is in host
//! memory, the head's copy beside every token's logits.

use super::Placement;
use super::calc::{Overflow, Product};
use super::params;
use crate::budget::{Category, Component};
use crate::bytes::Bytes;
use crate::hir::{Inference, Shape};
use crate::quant::WeightFormat;

/// The smallest batch whose host-held products the CUDA backend takes (`offload_op`).
pub(crate) const OP_OFFLOAD_MIN_BATCH: u64 = 32;

/// What llama.cpp keeps in host memory beyond the token embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Offload {
    /// The first repeating layers, held and run in host memory (`gpu_layers`).
    pub host_layers: u64,
    /// The output layer (head and final norm) too: `gpu_layers` at most the model's layers.
    pub output_on_host: bool,
    /// The first layers whose routed experts stay in host memory (`cpu_moe_layers`, at most the
    /// layers; 0 for a dense model).
    pub host_experts: u64,
}

impl Offload {
    /// The offload `inference` asks of a model of `shape`; `None` when the devices hold every
    /// layer, expert and the output (`gpu_layers` above the layers or not written, and no
    /// experts in host memory).
    pub(crate) fn of(inference: &Inference, shape: &Shape) -> Option<Offload> {
        let partial = inference.gpu_layers.filter(|g| *g <= shape.layers);
        let host_experts = match &shape.moe {
            Some(_) => inference.cpu_moe_layers.min(shape.layers),
            None => 0,
        };
        let offload = Offload {
            host_layers: partial.map_or(0, |g| shape.layers - g),
            output_on_host: partial.is_some(),
            host_experts,
        };
        (offload.output_on_host || offload.host_experts > 0).then_some(offload)
    }

    /// The layers whose routed experts are in host memory while the rest of the layer is on a
    /// device (the host-held layers hold their experts anyway).
    fn expert_layers(self) -> std::ops::Range<u64> {
        self.host_layers..self.host_experts.max(self.host_layers)
    }

    /// The layers on the devices.
    pub(crate) fn device_layers(self, shape: &Shape) -> u64 {
        shape.layers - self.host_layers
    }
}

/// What host memory holds of a model llama.cpp runs: the token embedding, and under `offload`
/// the host-held layers with their KV cache, the output layer and the routed experts kept there.
/// The host is the first stage of a pipeline (it holds the embedding), and the last too when it
/// holds the output.
pub(crate) fn host_held(
    shape: &Shape,
    inference: &Inference,
    offload: Option<Offload>,
) -> Result<Vec<Component>, Overflow> {
    let placement = Placement {
        tensor: 1,
        stage: 0,
        stages: if offload.is_some_and(|o| o.output_on_host) { 1 } else { 2 },
        first_layer: 0,
        layers: offload.map_or(0, |o| o.host_layers),
        host_experts: 0,
    };
    let mut held = super::llm::weights(
        shape,
        &placement,
        inference.weights,
        Category::Persistent,
        "weights in host memory (llama.cpp)",
    )?;
    if placement.layers > 0 {
        let mut kv = super::llm::kv_cache(
            shape,
            &placement,
            inference.kv_cache,
            inference.context,
            inference.sessions,
            1,
        )?;
        kv.name = "KV cache of the layers in host memory".into();
        held.push(kv);
    }
    if let Some(experts) = offload.map(Offload::expert_layers).filter(|r| !r.is_empty()) {
        let (bytes, formula) = expert_bytes(shape, inference.weights, experts.clone())?;
        held.push(Component {
            held_by: crate::budget::HeldBy::Tensors,
            name: format!(
                "routed experts of layers {}-{} in host memory (llama.cpp --n-cpu-moe)",
                experts.start,
                experts.end - 1
            )
            .into(),
            category: Category::Persistent,
            bytes,
            provenance: crate::budget::Provenance::Formula,
            formula,
            source: None,
        });
    }
    Ok(held)
}

/// The bytes of the routed experts of `layers`, per precision, and the formula.
fn expert_bytes(
    shape: &Shape,
    format: WeightFormat,
    layers: std::ops::Range<u64>,
) -> Result<(Bytes, String), Overflow> {
    let experts = layers.map(|layer| (layer, params::expert_matrices(shape, layer, 1)));
    let mut by_precision = super::llm::by_precision(shape, format, experts)?;
    by_precision.sort_unstable();
    let (total, terms) = super::llm::precision_sum(&by_precision)?;
    Ok((total, format!("{} = {total}", terms.join(" + "))))
}

/// What the first device copies from host memory to run host-held products, each with its
/// formula; nothing when the batch is below [`OP_OFFLOAD_MIN_BATCH`]. The embedding is never
/// copied: only a row lookup reads it, which the backend does not take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct HostCopies {
    /// The largest matrix of a host-held layer, or routed-expert tensor of a layer whose
    /// experts stay in host memory, beside that layer's product.
    pub layer: Option<(Bytes, String)>,
    /// The head, when the output is in host memory, beside every token's logits.
    pub head: Option<(Bytes, String)>,
}

impl HostCopies {
    pub(crate) fn of(
        shape: &Shape,
        format: WeightFormat,
        offload: Offload,
        tokens: u64,
    ) -> Result<HostCopies, Overflow> {
        if tokens < OP_OFFLOAD_MIN_BATCH {
            return Ok(HostCopies::default());
        }
        let gqa = shape.heads / shape.kv_heads.max(1);
        let mut layer: Option<(Bytes, String)> = None;
        let host_layers =
            (0..offload.host_layers).map(|index| (index, params::layer_matrices(shape, index, 1)));
        let host_experts =
            offload.expert_layers().map(|index| (index, params::expert_matrices(shape, index, 1)));
        for (index, matrices) in host_layers.chain(host_experts) {
            for (matrix, count) in matrices {
                let precision = format.matrix(matrix, index, shape.layers, gqa);
                let product = Product::new()
                    .times(count, "params")?
                    .bytes_each(precision.bytes_per_element(), precision.name())?;
                let bytes = product.value()?;
                if layer.as_ref().is_none_or(|(b, _)| bytes > *b) {
                    layer = Some((bytes, product.terms()));
                }
            }
        }
        let head = if offload.output_on_host && shape.output == crate::hir::Output::Lm {
            let precision = format.output();
            let product = Product::new()
                .times(shape.vocab, "vocab")?
                .times(shape.hidden, "hidden")?
                .bytes_each(precision.bytes_per_element(), precision.name())?;
            Some((product.value()?, product.terms()))
        } else {
            None
        };
        Ok(HostCopies { layer, head })
    }
}
