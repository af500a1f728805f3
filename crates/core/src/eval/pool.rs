//! vLLM's KV pool: the runtime takes a fraction of the device and fills what its own tensors
//! leave with KV-cache blocks. The question is then how many tokens of KV fit, not a peak.
//!
//! `available = total × gpu_memory_utilization − peak`, where the peak is the weights, the
//! activations of a profiling step and the memory outside PyTorch (`gpu_worker.py`, DOMAIN.md
//! §3.6); the pool is cut into blocks of 16 tokens per layer (`kv_cache_utils.get_num_blocks`).

use super::calc::{self, Overflow, Product, formula};
use crate::budget::{Category, Component, HeldBy, KvPool, Provenance};
use crate::bytes::{Bytes, write_thousands};
use crate::ratio::Ratio;

/// vLLM's `gpu_memory_utilization` default up to v0.19 (0.92 from v0.22): DOMAIN.md §3.6.
pub(crate) const DEFAULT_FRACTION: (i128, i128) = (9, 10);

/// Replaces the needed KV cache in `components` by the pool vLLM allocates, and reports the
/// pool. `per_token` is the KV bytes of one token on this device; `needed_tokens` what the
/// workload's sessions need at their full context.
pub(crate) fn fill(
    components: &mut Vec<Component>,
    capacity: Bytes,
    fraction: Ratio,
    per_token: Bytes,
    needed_tokens: u64,
) -> Result<KvPool, Overflow> {
    let kv_index = components.iter().position(|c| c.category == Category::Cache);
    let others = calc::sum(
        components.iter().enumerate().filter(|(i, _)| Some(*i) != kv_index).map(|(_, c)| c.bytes),
    )?;
    let share = Ratio::int(i128::from(capacity.0)).checked_mul(fraction).ok_or(Overflow)?;
    let share = Bytes(u64::try_from(share.floor()).map_err(|_| Overflow)?);
    let available = share.0.saturating_sub(others.0);
    // Whole 16-token blocks per layer: the pool's token count is a multiple of 16.
    let per_block = per_token.0.checked_mul(16).ok_or(Overflow)?.max(1);
    let tokens = available / per_block * 16;
    let bytes = Bytes(tokens / 16 * per_block);
    let percent = fraction.checked_mul(Ratio::int(100)).ok_or(Overflow)?;
    let mut formula =
        formula!("{percent} % × {} − {} (everything else) = ", capacity.human(), others.human());
    if calc::writing() {
        formula.push_str(&Bytes(available).human());
        formula.push_str(", in blocks of 16 tokens × ");
        write_thousands(&mut formula, per_token.0);
        formula.push_str(" B: ");
        write_thousands(&mut formula, tokens);
        formula.push_str(" tokens = ");
        formula.push_str(&bytes.to_string());
    }
    let pool = Component {
        held_by: HeldBy::Tensors,
        name: "KV cache pool (vLLM)".into(),
        category: Category::Cache,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: Some(
            "DOMAIN.md §3.6: vLLM gpu_worker available KV memory and get_num_blocks".into(),
        ),
    };
    let needed = Product::new().times(needed_tokens, "tokens")?.times(per_token.0, "B")?;
    let needed_formula = needed.terms();
    let needed = needed.value()?;
    let mut held = String::new();
    if calc::writing() {
        held.push_str(" (vLLM's pool holds ");
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
                    name: "KV cache (more than vLLM's pool)".into(),
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
        let beyond_share = Bytes(others.0.saturating_sub(share.0));
        calc::add(Bytes(needed.0.saturating_sub(bytes.0)), beyond_share)?
    };
    Ok(KvPool {
        fraction: formula!("{percent} %"),
        bytes,
        tokens,
        needed_tokens,
        needed,
        shortfall,
    })
}
