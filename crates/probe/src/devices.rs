//! `vram-probe devices`: every GPU with its exact figures, as one serde value.

use serde::{Deserialize, Serialize};

use crate::nvml::{self, DeviceInfo, Handle, SystemInfo};
use crate::reading::Reading;

/// The version of the JSON shapes this crate writes (`devices` and `run` reports).
pub const SCHEMA_VERSION: u32 = 1;

/// What `vram-probe devices --format json` prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Devices {
    pub schema_version: u32,
    /// `vram-probe-devices`.
    pub kind: String,
    pub probe_version: String,
    pub system: SystemInfo,
    pub device_count: Reading<u32>,
    pub devices: Vec<DeviceInfo>,
}

pub fn read(handle: &Handle) -> Devices {
    let count: Reading<u32> = nvml::count(handle).into();
    let devices = (0..count.value().unwrap_or(0)).map(|i| nvml::device(handle, i)).collect();
    Devices {
        schema_version: SCHEMA_VERSION,
        kind: "vram-probe-devices".to_string(),
        probe_version: crate::VERSION.to_string(),
        system: nvml::system(handle),
        device_count: count,
        devices,
    }
}
