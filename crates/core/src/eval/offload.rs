//! llama.cpp's partial offload (`-ngl N`, Ollama's `num_gpu`): which layers the devices hold,
//! what stays in host memory, and the weight copies its scheduler makes to run a host-held
//! layer's large products on the device.
//!
//! llama.cpp puts the last `N` repeating layers on the devices (`i_gpu_start = n_layer - N` in
//! `llama_model::load_tensors`) and the output layer (head and final norm) with them only when
//! `N` exceeds the layers, which is why Ollama reports "33/33 layers" for a 32-layer model. The
//! token embedding stays in host memory whatever `N` is. Each layer's KV cache sits with its
//! layer (`offload_kqv`, on by default).
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

/// Where llama.cpp's layers are under a `gpu_layers` of at most the model's layers: the output
/// layer (head and final norm) in host memory, with the first `host_layers` repeating layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Offload {
    /// The first repeating layers, held and run in host memory (0 when only the output is).
    pub host_layers: u64,
}

impl Offload {
    /// The offload `inference` asks of a model of `shape`; `None` when the devices hold every
    /// layer and the output (`gpu_layers` above the layers, or not written).
    pub(crate) fn of(inference: &Inference, shape: &Shape) -> Option<Offload> {
        let gpu_layers = inference.gpu_layers?;
        (gpu_layers <= shape.layers).then(|| Offload { host_layers: shape.layers - gpu_layers })
    }

    /// The layers on the devices.
    pub(crate) fn device_layers(self, shape: &Shape) -> u64 {
        shape.layers - self.host_layers
    }
}

/// What host memory holds of a model llama.cpp runs: the token embedding, and under `offload`
/// the host-held layers with their KV cache and the output layer. The host is the first stage of
/// a pipeline (it holds the embedding), and the last too under an offload (it holds the output).
pub(crate) fn host_held(
    shape: &Shape,
    inference: &Inference,
    offload: Option<Offload>,
) -> Result<Vec<Component>, Overflow> {
    let placement = Placement {
        tensor: 1,
        stage: 0,
        stages: if offload.is_some() { 1 } else { 2 },
        first_layer: 0,
        layers: offload.map_or(0, |o| o.host_layers),
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
    Ok(held)
}

/// What the first device copies from host memory to run host-held products, each with its
/// formula; nothing when the batch is below [`OP_OFFLOAD_MIN_BATCH`]. The embedding is never
/// copied: only a row lookup reads it, which the backend does not take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct HostCopies {
    /// The largest matrix of a host-held layer, beside that layer's product.
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
        for index in 0..offload.host_layers {
            for (matrix, count) in params::layer_matrices(shape, index, 1) {
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
        let head = if shape.output == crate::hir::Output::Lm {
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
