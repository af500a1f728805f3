//! The KV pool of a serving runtime: it takes a share of the device and fills what its own
//! tensors leave of it with KV-cache blocks. The question is then how many tokens of KV fit,
//! not a peak. Each runtime's rule is in [`super::serving`].
//!
//! vLLM: `available = total × gpu_memory_utilization − peak`, where the peak is the weights, the
//! activations of a profiling step and the memory outside PyTorch (`gpu_worker.py`, DOMAIN.md
//! §3.6); the pool is cut into blocks of 16 tokens per layer (`kv_cache_utils.get_num_blocks`).

use std::fmt::Write as _;

use super::calc::{self, Overflow, Product, formula};
use super::serving::{PoolRule, Share};
use crate::budget::{Category, Component, HeldBy, KvPool, Provenance};
use crate::bytes::{Bytes, write_thousands};
use crate::ratio::Ratio;

/// Replaces the needed KV cache in `components` by the pool the runtime allocates by `rule`, and
/// reports the pool. `per_token` is the KV bytes of one token on this device; `needed_tokens`
/// what the workload's sessions need at their full context.
pub(crate) fn fill(
    components: &mut Vec<Component>,
    capacity: Bytes,
    rule: &PoolRule,
    per_token: Bytes,
    needed_tokens: u64,
) -> Result<KvPool, Overflow> {
    let kv_index = components.iter().position(|c| c.category == Category::Cache);
    // What the runtime holds when it sizes the pool: its CUDA graphs, held in the allocator's
    // cache, are captured only once the cache exists, so they come on top of the share
    // (DOMAIN.md §3.6, §6.5: vLLM counts them inside it only from v0.21).
    let held = |keep: fn(&Component) -> bool| {
        calc::sum(
            components
                .iter()
                .enumerate()
                .filter(|(i, c)| {
                    Some(*i) != kv_index
                        && !matches!(c.held_by, HeldBy::AllocatorCache | HeldBy::ReleasableCache)
                        && keep(c)
                })
                .map(|(_, c)| c.bytes),
        )
    };
    let everything = held(|_| true)?;
    // What the runtime holds once its weights are loaded: the context and the weights.
    let loaded = held(|c| c.held_by == HeldBy::Runtime || c.category == Category::Persistent)?;
    let (base, carved) = match rule.share {
        Share::Device => (capacity, everything),
        Share::FreeMemoryLessWeights => {
            let context = held(|c| c.held_by == HeldBy::Runtime)?;
            (
                Bytes(capacity.0.saturating_sub(context.0)),
                held(|c| c.category == Category::Persistent)?,
            )
        }
        Share::Remaining => (Bytes(capacity.0.saturating_sub(everything.0)), Bytes::ZERO),
        Share::FreeAfterWeights => (Bytes(capacity.0.saturating_sub(loaded.0)), Bytes::ZERO),
    };
    let share = Ratio::int(i128::from(base.0)).checked_mul(rule.fraction).ok_or(Overflow)?;
    let share = Bytes(u64::try_from(share.floor()).map_err(|_| Overflow)?);
    let available = share.0.saturating_sub(carved.0);
    // Whole blocks per layer: the pool's token count is a multiple of the block.
    let block = rule.block.max(1);
    let per_block = per_token.0.checked_mul(block).ok_or(Overflow)?.max(1);
    let tokens = available / per_block * block;
    let bytes = Bytes(tokens / block * per_block);
    let percent = rule.fraction.checked_mul(Ratio::int(100)).ok_or(Overflow)?;
    let taken_of = match rule.share {
        Share::Device => formula!("{}", capacity.human()),
        Share::FreeMemoryLessWeights => formula!(
            "({} − {} outside PyTorch)",
            capacity.human(),
            Bytes(capacity.0 - base.0).human()
        ),
        Share::Remaining => formula!(
            "({} − {} everything else)",
            capacity.human(),
            Bytes(capacity.0 - base.0).human()
        ),
        Share::FreeAfterWeights => formula!(
            "({} − {} context and weights)",
            capacity.human(),
            Bytes(capacity.0 - base.0).human()
        ),
    };
    let mut formula = match rule.share {
        Share::Device => {
            formula!("{percent} % × {taken_of} − {} (everything else) = ", carved.human())
        }
        Share::FreeMemoryLessWeights => {
            formula!("{percent} % × {taken_of} − {} (the weights) = ", carved.human())
        }
        Share::Remaining | Share::FreeAfterWeights => formula!("{percent} % × {taken_of} = "),
    };
    if calc::writing() {
        formula.push_str(&Bytes(available).human());
        if block > 1 {
            let _ = write!(formula, ", in blocks of {block} tokens × ");
        } else {
            formula.push_str(", in tokens of ");
        }
        write_thousands(&mut formula, per_token.0);
        formula.push_str(" B: ");
        write_thousands(&mut formula, tokens);
        formula.push_str(" tokens = ");
        formula.push_str(&bytes.to_string());
    }
    let pool = Component {
        held_by: HeldBy::Tensors,
        name: format!("KV cache pool ({})", rule.runtime).into(),
        category: Category::Cache,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: Some(rule.source.into()),
    };
    let needed = Product::new().times(needed_tokens, "tokens")?.times(per_token.0, "B")?;
    let needed_formula = needed.terms();
    let needed = needed.value()?;
    let mut held = String::new();
    if calc::writing() {
        let _ = write!(held, " ({}'s pool holds ", rule.runtime);
        write_thousands(&mut held, tokens);
        held.push_str(" tokens)");
    }
    if tokens >= needed_tokens {
        match kv_index {
            Some(i) => components[i] = pool,
            None => components.push(pool),
        }
    } else {
        // A pool too small for the sessions: the budget carries the cache they need, so the
        // verdict shows by how much it falls short; and never less than the pool itself, as
        // vLLM takes its whole share anyway (a budget must not shrink when sessions outgrow it).
        let floor = needed.max(Bytes(available));
        match kv_index {
            Some(i) if components[i].bytes >= floor => components[i].formula.push_str(&held),
            slot => {
                let mut formula = formula!("{needed_formula} = {needed}");
                if calc::writing() {
                    if floor > needed {
                        formula.push_str(", at least the pool's ");
                        formula.push_str(&Bytes(available).human());
                    }
                    formula.push_str(&held);
                }
                let kv = Component {
                    name: format!("KV cache (more than {}'s pool)", rule.runtime).into(),
                    bytes: floor,
                    formula,
                    ..pool
                };
                match slot {
                    Some(i) => components[i] = kv,
                    None => components.push(kv),
                }
            }
        }
    }
    let shortfall = if tokens >= needed_tokens {
        Bytes::ZERO
    } else {
        // What the runtime holds beyond its share (beyond the device, for a share of what
        // is left), which leaves no pool at all.
        let beyond_share = match rule.share {
            Share::Remaining => Bytes(everything.0.saturating_sub(capacity.0)),
            Share::FreeAfterWeights => Bytes(loaded.0.saturating_sub(capacity.0)),
            _ => Bytes(carved.0.saturating_sub(share.0)),
        };
        calc::add(Bytes(needed.0.saturating_sub(bytes.0)), beyond_share)?
    };
    let of = match rule.share {
        Share::Device => "of the device",
        Share::FreeMemoryLessWeights => "of the free memory",
        Share::Remaining => "of the memory left after loading",
        Share::FreeAfterWeights => "of the memory the weights leave",
    };
    Ok(KvPool {
        fraction: formula!("{percent} % {of}"),
        bytes,
        tokens,
        needed_tokens,
        needed,
        shortfall,
    })
}
