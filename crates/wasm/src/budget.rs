//! The budget as JavaScript sees it: a mirror of `vram_core::budget` that derives TypeScript
//! declarations with tsify.
//!
//! The core has no wasm or TypeScript dependency (ARCHITECTURE.md), so its types cannot derive
//! `Tsify` themselves. The exports send the core's own values (as the CLI's JSON); these
//! mirrors only declare their types. The round-trip test (`tests/round_trip.rs`, every example)
//! fills them from the core's JSON with `deny_unknown_fields` and writes them back: a field the
//! core adds or renames fails it until the mirror follows, so the generated `.d.ts` cannot drift
//! from the JSON that the CLI writes.
//!
//! Byte counts are JavaScript numbers: exact up to 2^53 bytes (8 PiB), far above any device.
//! A budget beyond that comes back as an error value, never as a rounded number.

use serde::{Deserialize, Serialize};
use tsify::Tsify;

/// A byte count (exact below 2^53).
pub type Bytes = u64;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
#[tsify(missing_as_null)]
pub struct Budget {
    pub schema_version: u32,
    pub checks: Vec<CheckBudget>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[tsify(optional)]
    pub queries: Vec<QueryAnswer>,
}

/// The answer to a `find` query.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct QueryAnswer {
    pub query: String,
    pub workload: String,
    pub kind: QueryKind,
    pub answer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub value: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub split: Option<SplitReport>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[tsify(optional)]
    pub machines: Vec<MachineAnswer>,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub warning: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(rename_all = "snake_case")]
pub enum QueryKind {
    MaxSessions,
    MaxContext,
    MaxBatch,
    MaxGpuLayers,
    MinDevices,
    Machines,
    Precision,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct MachineAnswer {
    pub machine: String,
    pub title: String,
    pub gpus: u64,
    pub gpu_memory: Bytes,
    pub split: SplitReport,
    pub verdict: Verdict,
}

/// A change that makes an over-budget check fit, found by the planner's search.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct Suggestion {
    pub kind: SuggestionKind,
    pub change: String,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub value: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub split: Option<SplitReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub warning: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(rename_all = "snake_case")]
pub enum SuggestionKind {
    Sessions,
    Context,
    Batch,
    Experts,
    GpuLayers,
    Devices,
    Pipeline,
    Training,
    Runtime,
    Precision,
    Machine,
}

/// Host RAM and disk of a check on a machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct HostBudget {
    pub ram: HostLine,
    pub disk: HostLine,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
#[tsify(missing_as_null)]
pub struct HostLine {
    pub capacity: Option<Bytes>,
    pub components: Vec<Component>,
    pub required: Bytes,
    pub verdict: Option<Verdict>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
#[tsify(missing_as_null)]
pub struct CheckBudget {
    pub id: String,
    pub title: Option<String>,
    pub workload: String,
    pub target: String,
    pub split: SplitReport,
    pub devices: Vec<DeviceBudget>,
    pub verdict: Verdict,
    pub notes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[tsify(optional)]
    pub suggestions: Vec<Suggestion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub host: Option<HostBudget>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct SplitReport {
    pub tensor: u32,
    pub pipeline: u32,
    pub data: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
#[tsify(missing_as_null)]
pub struct DeviceBudget {
    pub index: u32,
    pub device: String,
    pub device_title: String,
    pub role: String,
    pub capacity: Capacity,
    pub components: Vec<Component>,
    pub used: Bytes,
    pub views: Views,
    pub band: Band,
    pub headroom: HeadroomReport,
    /// Of `used`, the cache returned before out of memory; absent when zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub releasable: Option<Bytes>,
    /// `used − releasable + headroom`.
    pub required: Bytes,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub kv_pool: Option<KvPool>,
    pub verdict: Verdict,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct Capacity {
    pub bytes: Bytes,
    pub provenance: Provenance,
    /// What the driver keeps of `bytes`; zero when unknown.
    pub reserved: Bytes,
    /// `bytes − reserved`: what verdicts count.
    pub usable: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct HeadroomReport {
    pub bytes: Bytes,
    pub rule: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct KvPool {
    pub fraction: String,
    pub bytes: Bytes,
    pub tokens: u64,
    pub needed_tokens: u64,
    pub needed: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct Component {
    pub name: String,
    pub category: Category,
    pub bytes: Bytes,
    pub provenance: Provenance,
    pub formula: String,
    pub held_by: HeldBy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub source: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct Views {
    pub allocated: Bytes,
    pub reserved: Bytes,
    pub device: Bytes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct Band {
    pub low: Bytes,
    pub high: Bytes,
    /// Whose measured errors set the band's width.
    pub basis: BandBasis,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(rename_all = "snake_case")]
pub enum BandBasis {
    Inference,
    Training,
    Diffusion,
    Components,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(rename_all = "snake_case")]
pub enum HeldBy {
    Tensors,
    AllocatorCache,
    ReleasableCache,
    Runtime,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Persistent,
    Intermediate,
    Cache,
    Workspace,
    TrainingState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(rename_all = "lowercase")]
pub enum Provenance {
    Exact,
    Formula,
    Assumed,
    Observed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Tsify)]
#[serde(tag = "status", rename_all = "snake_case", deny_unknown_fields)]
pub enum Verdict {
    Fits { free: Bytes },
    Over { over: Bytes },
    Unsupported { reason: String },
}

/// The mirror of a core value, through the core's own JSON.
pub fn mirror<T: serde::de::DeserializeOwned>(
    value: &impl Serialize,
) -> Result<T, serde_json::Error> {
    serde_json::from_value(serde_json::to_value(value)?)
}
