//! What an expressed point is compared with: a view of the peak, some components of the budget,
//! or the check's verdict.

use vram_core::budget::{Category, Component, HeldBy};

use crate::views::{Basis, View};

/// The part of the estimate a measurement corresponds to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A peak, in one view.
    Peak { view: View, basis: Basis, scope: Scope },
    /// Some components, as a runtime's log reports them.
    Component { selector: Selector, scope: Scope },
    /// An out-of-memory report or the largest run that fitted: the estimate must agree.
    Verdict { expect_fits: bool },
}

/// How per-device numbers combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One device, or each device of a split (the largest is compared).
    EachDevice,
    /// The sum over all devices (sources that report a total).
    SumOfDevices,
}

/// A set of budget components that a runtime's log reports as one number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selector {
    /// The model's weights (persistent components).
    Weights,
    /// The KV cache (cache components).
    KvCache,
    /// The KV pool a runtime pre-allocates (the budget's `kv_pool`, where the core reports one).
    KvPool,
    /// Activations and temporaries of a forward step (intermediate components), as the rise of
    /// the allocator's peak over the loaded weights: with the workspaces the first step
    /// allocates through the allocator (PyTorch's cuBLAS workspace, made at the first matmul).
    Intermediates,
    /// Memory outside the framework's allocator: CUDA context, NCCL (held by the runtime).
    OutsideAllocator,
    /// Weights plus the memory outside the allocator (a load measured with nvidia-smi).
    WeightsAndOutside,
    /// CUDA graphs a server captures (vLLM's "Graph capturing finished ... took N GiB").
    CudaGraphs,
    /// The tokens a pre-allocated KV pool holds, as servers log them (vLLM's `# GPU blocks`
    /// times its block size, SGLang's `max_total_num_tokens`): compared in tokens, not bytes.
    KvPoolTokens,
}

impl Selector {
    pub fn name(self) -> &'static str {
        match self {
            Selector::Weights => "weights",
            Selector::KvCache => "KV cache",
            Selector::KvPool => "KV pool",
            Selector::Intermediates => "activations",
            Selector::OutsideAllocator => "outside allocator",
            Selector::WeightsAndOutside => "weights + context",
            Selector::CudaGraphs => "CUDA graphs",
            Selector::KvPoolTokens => "KV pool tokens",
        }
    }

    pub fn includes(self, component: &Component) -> bool {
        let persistent = component.category == Category::Persistent;
        let runtime = component.held_by == HeldBy::Runtime;
        match self {
            Selector::Weights => persistent,
            Selector::KvCache | Selector::KvPool | Selector::KvPoolTokens => {
                component.category == Category::Cache
            }
            Selector::CudaGraphs => component.name.to_lowercase().contains("cuda graph"),
            Selector::Intermediates => {
                component.category == Category::Intermediate
                    || (component.category == Category::Workspace
                        && component.held_by == HeldBy::Tensors)
            }
            Selector::OutsideAllocator => runtime,
            Selector::WeightsAndOutside => persistent || runtime,
        }
    }
}

impl Target {
    /// A short label for tables: `allocated`, `allocated (not stated)`, `component: KV cache`.
    pub fn label(&self) -> String {
        match self {
            Target::Peak { view, basis: Basis::Stated, scope } => {
                format!("{view}{}", scope.suffix())
            }
            Target::Peak { view, basis: Basis::NotStated, scope } => {
                format!("{view} (not stated){}", scope.suffix())
            }
            Target::Component { selector, scope } => {
                format!("component: {}{}", selector.name(), scope.suffix())
            }
            Target::Verdict { expect_fits: true } => "verdict: fits".to_string(),
            Target::Verdict { expect_fits: false } => "verdict: does not fit".to_string(),
        }
    }
}

impl Scope {
    fn suffix(self) -> &'static str {
        match self {
            Scope::EachDevice => "",
            Scope::SumOfDevices => ", sum of GPUs",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vram_core::budget::Provenance;
    use vram_core::bytes::Bytes;

    fn component(category: Category, held_by: HeldBy) -> Component {
        Component {
            held_by,
            category,
            name: "".into(),
            bytes: Bytes(1),
            provenance: Provenance::Assumed,
            formula: String::new(),
            source: None,
        }
    }

    #[test]
    fn activations_count_what_the_allocator_holds_for_the_step() {
        let activations = Selector::Intermediates;
        assert!(activations.includes(&component(Category::Intermediate, HeldBy::Tensors)));
        // The cuBLAS workspace is allocated through the allocator at the first matmul, so it is
        // part of the peak's rise over the loaded weights; the CUDA context is not.
        assert!(activations.includes(&component(Category::Workspace, HeldBy::Tensors)));
        assert!(!activations.includes(&component(Category::Workspace, HeldBy::Runtime)));
        assert!(!activations.includes(&component(Category::Workspace, HeldBy::AllocatorCache)));
        assert!(!activations.includes(&component(Category::Persistent, HeldBy::Tensors)));
    }
}
