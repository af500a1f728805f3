//! The rest of the machine: host RAM and disk, each a budget line with its components and a
//! verdict against what the machine declares (`host_ram`, `disk`).
//!
//! Only checks on a machine get these lines: a bare device has no host to budget. The lines are
//! whole-machine totals (every process of the check together), with no headroom rule of their
//! own. A line over its capacity makes the check not fit, like an over-budget GPU.
//!
//! RAM: one copy of the weights staged while loading (checkpoints are read through the page
//! cache before each rank copies its shard to its GPU), vLLM's pinned swap space per GPU, the
//! training states DeepSpeed offloads to the host, an offloading diffusion pipeline's weights,
//! which stay on the host between their turns on the device, and what llama.cpp keeps in host
//! memory (`eval/offload.rs`). Disk: the model files (those of the weights kept in host memory
//! too), the original checkpoint kept beside a converted one, and one training checkpoint.

use super::calc::{self, Overflow};
use super::offload::{self, Offload as LayerOffload};
use crate::budget::{Category, Component, HeldBy, HostBudget, HostLine, Provenance, Verdict};
use crate::bytes::{Bytes, GIB};
use crate::hir::{DiffusionOffload, Layered, Machine, Method, Offload, Runtime, Workload};
use crate::ratio::Ratio;

/// Why llama.cpp's host lines are there.
const HOST_HELD: &str = "llama.cpp keeps the token embedding in host memory, under -ngl the first layers with their KV cache and the output layer, and under --n-cpu-moe the first layers' routed experts (llama_model::load_tensors)";

/// vLLM's default CPU swap space for preempted sequences, pinned host memory per GPU
/// (`EngineArgs.swap_space = 4` GiB, V0 engine).
const VLLM_SWAP: u64 = 4 * GIB;

/// The host lines of a check on `machine`. `persistent` is the weights of one replica (the sum
/// of the persistent components over the ranks of the first replica); `gpus` the devices used.
pub(super) fn host(
    program: &Layered<'_>,
    machine: &Machine,
    workloads: &[&Workload],
    persistent: Bytes,
    gpus: u64,
) -> Result<HostBudget, Overflow> {
    let mut ram = vec![component(
        "weights staged while loading",
        persistent,
        Provenance::Assumed,
        format!("{persistent}: one copy of the weights of one replica"),
        "checkpoints are read through the page cache (safetensors mmap) before each rank copies its shard to its GPU",
    )];
    let mut disk = vec![component(
        "model files",
        persistent,
        Provenance::Formula,
        format!("{persistent}: the weights of one replica at their declared precision"),
        "the files hold every weight once, in the precision they are loaded in",
    )];
    for workload in workloads {
        if let Some(diffusion) =
            workload.diffusion.as_ref().filter(|d| d.offload != DiffusionOffload::None)
        {
            let held = super::diffusion::pipeline_weights(program, diffusion)?;
            ram.push(component(
                format!("{}: pipeline weights held on the host (offload)", workload.name),
                held,
                Provenance::Formula,
                format!("{held}: every model's weights, which offloading moves to the device in turn"),
                "diffusers enable_model_cpu_offload / enable_sequential_cpu_offload / enable_group_offload keep the weights in CPU memory between uses",
            ));
            // The device holds only a part at a time; the files hold every weight.
            let rest = Bytes(held.0.saturating_sub(persistent.0));
            if rest > Bytes::ZERO {
                disk.push(component(
                    format!("{}: files of the weights not on the device", workload.name),
                    rest,
                    Provenance::Formula,
                    format!(
                        "{held} of pipeline weights less the {persistent} on the device = {rest}"
                    ),
                    "the files hold every weight once, in the precision they are loaded in",
                ));
            }
        }
        if let Some(diffusion) = &workload.diffusion
            && let Some(swapped) = super::block_swap::swapped(program, diffusion)?
        {
            let (bytes, arithmetic) = super::block_swap::host_bytes(&swapped, diffusion)?;
            ram.push(component(
                format!("{}: denoiser blocks swapped to the host", workload.name),
                bytes,
                Provenance::Formula,
                arithmetic,
                "kohya's custom_offloading_utils.ModelOffloader keeps the swapped blocks' weights in CPU memory between their turns on the device",
            ));
            disk.push(component(
                format!("{}: files of the swapped blocks' weights", workload.name),
                bytes,
                Provenance::Formula,
                format!("{bytes}: the weights kept on the host, which the files hold too"),
                "the files hold every weight once, in the precision they are loaded in",
            ));
        }
        let model = workload.model.as_ref().and_then(|m| program.model(m));
        if let (Runtime::LlamaCpp, Some(inference), Some(shape)) =
            (&workload.runtime, &workload.inference, model.and_then(|m| m.shape.as_ref()))
        {
            let held = offload::host_held(shape, inference, LayerOffload::of(inference, shape))?;
            let weights = calc::sum(
                held.iter().filter(|c| c.category == Category::Persistent).map(|c| c.bytes),
            )?;
            for held in held {
                ram.push(Component {
                    name: format!("{}: {}", workload.name, held.name).into(),
                    source: Some(HOST_HELD.into()),
                    ..held
                });
            }
            disk.push(component(
                format!("{}: files of the weights in host memory", workload.name),
                weights,
                Provenance::Formula,
                format!("{weights}: the weights llama.cpp keeps in host memory"),
                "the files hold every weight once, in the precision they are loaded in",
            ));
        }
        if workload.runtime == Runtime::Vllm {
            let bytes = Bytes(VLLM_SWAP.checked_mul(gpus).ok_or(Overflow)?);
            ram.push(component(
                format!("{}: pinned swap space (vLLM)", workload.name),
                bytes,
                Provenance::Assumed,
                format!("4 GiB × {gpus} GPUs = {bytes}"),
                "vLLM EngineArgs.swap_space default, 4 GiB of pinned CPU memory per GPU (V0 engine)",
            ));
        }
        if let (Some(stored), Some(inference)) =
            (model.and_then(|m| m.stored.as_ref()), &workload.inference)
            && stored.format != inference.weights
        {
            disk.push(component(
                format!("{}: original checkpoint beside the converted one", workload.name),
                stored.bytes,
                Provenance::Exact,
                format!(
                    "{} as stored ({}), kept while converting to {}",
                    stored.bytes,
                    stored.format.name(),
                    inference.weights.name()
                ),
                "the checkpoint's headers",
            ));
        }
        let Some(training) = &workload.training else { continue };
        // The trained model: a language model's shape, or a pipeline's denoiser.
        let params = match (model.and_then(|m| m.shape.as_ref()), &workload.diffusion) {
            (Some(shape), _) => super::params::parameter_count(shape).ok_or(Overflow)?,
            (None, Some(diffusion)) => {
                match super::diffusion::parameter_count(program, &diffusion.denoiser.model) {
                    Some(params) => params,
                    None => continue,
                }
            }
            (None, None) => continue,
        };
        if !matches!(training.method, Method::Full) {
            if training.offload == Offload::Parameters {
                // DeepSpeed's `offload_param` keeps every parameter on the host, frozen or not.
                let per = training.weights.bytes_per_element();
                let bytes = Bytes::for_elements(params, per).ok_or(Overflow)?;
                ram.push(component(
                    format!("{}: frozen parameters offloaded", workload.name),
                    bytes,
                    Provenance::Formula,
                    format!("{params} params × {per} B = {bytes}"),
                    "DeepSpeed offload_param keeps the parameters in host memory and fetches a layer at a time",
                ));
            }
            continue;
        }
        let states = Ratio::int(i128::from(training.optimizer.states()))
            .checked_mul(training.optimizer.bytes_per_state())
            .ok_or(Overflow)?;
        let master =
            training.master.map_or(Ratio::ZERO, crate::precision::Precision::bytes_per_element);
        if training.offload != Offload::None {
            // The host optimizer's fp32 gradient partition, when the gradients go there.
            let sharded = training.gradients_on_host();
            let gradients = if sharded { Ratio::int(4) } else { Ratio::ZERO };
            // `offload_param`: the 16-bit parameters live on the host too, fetched a layer at a
            // time (ZeRO-Infinity's parameter offload).
            let parameters = if training.offload == Offload::Parameters {
                training.weights.bytes_per_element()
            } else {
                Ratio::ZERO
            };
            let per = master
                .checked_add(states)
                .and_then(|p| p.checked_add(gradients))
                .and_then(|p| p.checked_add(parameters));
            let per = per.ok_or(Overflow)?;
            let bytes = Bytes::for_elements(params, per).ok_or(Overflow)?;
            let what = match (sharded, parameters > Ratio::ZERO) {
                (true, true) => {
                    "parameters, optimizer state, master weights and fp32 gradients offloaded"
                }
                (false, true) => "parameters, optimizer state and master weights offloaded",
                (true, false) => "optimizer state, master weights and fp32 gradients offloaded",
                (false, false) => "optimizer state and master weights offloaded",
            };
            ram.push(component(
                format!("{}: {what}", workload.name),
                bytes,
                Provenance::Formula,
                format!("{params} params × {per} B = {bytes}"),
                "DeepSpeed offload_optimizer keeps fp32 master weights, optimizer state and (ZeRO-Offload) fp32 gradients in host memory; offload_param the parameters as well",
            ));
        }
        let per = training
            .weights
            .bytes_per_element()
            .checked_add(master)
            .and_then(|r| r.checked_add(states))
            .ok_or(Overflow)?;
        let bytes = Bytes::for_elements(params, per).ok_or(Overflow)?;
        disk.push(component(
            format!("{}: one training checkpoint", workload.name),
            bytes,
            Provenance::Formula,
            format!("{params} params × {per} B (weights, master, optimizer state) = {bytes}"),
            "a resumable checkpoint saves the weights, the master copy and the optimizer state",
        ));
    }
    Ok(HostBudget { ram: line(ram, machine.host_ram)?, disk: line(disk, machine.disk)? })
}

fn line(components: Vec<Component>, capacity: Option<Bytes>) -> Result<HostLine, Overflow> {
    let required = calc::sum(components.iter().map(|c| c.bytes))?;
    let verdict = capacity.map(|capacity| {
        if required <= capacity {
            Verdict::Fits { free: Bytes(capacity.0 - required.0) }
        } else {
            Verdict::Over { over: Bytes(required.0 - capacity.0) }
        }
    });
    Ok(HostLine { capacity, components, required, verdict })
}

fn component(
    name: impl Into<std::borrow::Cow<'static, str>>,
    bytes: Bytes,
    provenance: Provenance,
    formula: String,
    source: &'static str,
) -> Component {
    Component {
        name: name.into(),
        category: Category::Persistent,
        bytes,
        provenance,
        formula,
        held_by: HeldBy::Tensors,
        source: Some(source.into()),
    }
}
