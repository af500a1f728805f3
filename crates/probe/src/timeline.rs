//! The downsampled timeline of a run: per device, the maximum in each bucket of time.
//!
//! The bucket width starts at 1 ms and doubles whenever the run would need more than
//! [`TIMELINE_POINTS`] buckets, so a run of any length keeps at most that many, and a transient
//! spike survives (the maximum of a bucket, never its mean). The columns are allocated once, at
//! their final size, and halved in place: recording a sample never allocates.

use serde::{Deserialize, Serialize};

/// The most timeline buckets kept per device.
pub const TIMELINE_POINTS: usize = 1000;

/// Per device, the maximum in each bucket of `bucket_ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub bucket_ms: f64,
    pub devices: Vec<DeviceTimeline>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceTimeline {
    pub index: u32,
    /// Device-level used bytes, maximum per bucket; `null` where no sample succeeded.
    pub used_max: Vec<Option<u64>>,
    /// All commands' processes together, maximum per bucket; `null` where unknown.
    pub commands_max: Vec<Option<u64>>,
}

impl Timeline {
    pub fn new(devices: &[u32]) -> Timeline {
        Timeline {
            bucket_ms: 1.0,
            devices: devices
                .iter()
                .map(|&index| DeviceTimeline {
                    index,
                    used_max: Vec::with_capacity(TIMELINE_POINTS),
                    commands_max: Vec::with_capacity(TIMELINE_POINTS),
                })
                .collect(),
        }
    }

    /// Records the sample of `device` (its position) at `t_ms`.
    pub fn record(&mut self, device: usize, t_ms: f64, used: Option<u64>, commands: Option<u64>) {
        #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "t ≥ 0")]
        let mut bucket = (t_ms / self.bucket_ms) as usize;
        while bucket >= TIMELINE_POINTS {
            self.halve();
            bucket /= 2;
        }
        let Some(series) = self.devices.get_mut(device) else { return };
        for (column, value) in [(&mut series.used_max, used), (&mut series.commands_max, commands)]
        {
            if column.len() <= bucket {
                // Within the capacity reserved in `new`: no allocation.
                column.resize(bucket + 1, None);
            }
            column[bucket] = max_opt(column[bucket], value);
        }
    }

    /// Doubles the bucket width, merging pairs of buckets in place.
    fn halve(&mut self) {
        self.bucket_ms *= 2.0;
        for series in &mut self.devices {
            for column in [&mut series.used_max, &mut series.commands_max] {
                let merged = column.len().div_ceil(2);
                for i in 0..merged {
                    let second = column.get(2 * i + 1).copied().flatten();
                    column[i] = max_opt(column[2 * i], second);
                }
                column.truncate(merged);
            }
        }
    }
}

fn max_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_keeps_the_maximum_when_it_halves() {
        let mut t = Timeline::new(&[0]);
        t.record(0, 0.5, Some(10), None);
        t.record(0, 1.5, Some(99), None);
        for i in 2..TIMELINE_POINTS {
            #[expect(clippy::cast_precision_loss, reason = "test")]
            t.record(0, i as f64, Some(5), Some(1));
        }
        assert!((t.bucket_ms - 1.0).abs() < f64::EPSILON);
        t.record(0, 1000.0, Some(7), None);
        assert!((t.bucket_ms - 2.0).abs() < f64::EPSILON);
        assert_eq!(t.devices[0].used_max[0], Some(99));
        assert_eq!(t.devices[0].commands_max[0], None);
        assert_eq!(t.devices[0].commands_max[1], Some(1));
        assert_eq!(t.devices[0].used_max[500], Some(7));
        assert_eq!(t.devices[0].used_max.len(), 501);
    }

    #[test]
    fn recording_stays_within_the_reserved_capacity() {
        let mut t = Timeline::new(&[0, 1]);
        let before = t.devices[1].used_max.as_ptr();
        for i in 0..10 * TIMELINE_POINTS {
            #[expect(clippy::cast_precision_loss, reason = "test")]
            t.record(1, i as f64 * 0.7, Some(1), Some(1));
        }
        assert!(t.devices[1].used_max.len() <= TIMELINE_POINTS);
        assert_eq!(t.devices[1].used_max.as_ptr(), before, "the column was reallocated");
    }
}
