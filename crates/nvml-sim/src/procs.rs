//! Resolving `"child:I.J"` pid paths against the live process tree (Linux `/proc`).
//!
//! A scenario cannot know the pids of the commands the probe will start, so it names them by
//! position: `child:0` is the first child of the process that loaded this library, in start
//! order, and `child:0.1` is the second child of that one. A resolved path keeps its pid;
//! an unresolved one is retried at most every 2 ms, so a 1 kHz sampler does not read `/proc`
//! on every call.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const RETRY: Duration = Duration::from_millis(2);

#[derive(Debug, Default)]
pub(crate) struct Resolver {
    resolved: BTreeMap<String, u32>,
    tried: BTreeMap<String, Instant>,
}

impl Resolver {
    pub(crate) fn resolve(&mut self, path: &str) -> Option<u32> {
        if let Some(pid) = self.resolved.get(path) {
            return Some(*pid);
        }
        if self.tried.get(path).is_some_and(|at| at.elapsed() < RETRY) {
            return None;
        }
        self.tried.insert(path.to_string(), Instant::now());
        let pid = walk(path)?;
        self.resolved.insert(path.to_string(), pid);
        Some(pid)
    }
}

fn walk(path: &str) -> Option<u32> {
    let indices = path.strip_prefix("child:")?;
    let mut pid = std::process::id();
    for index in indices.split('.') {
        let index: usize = index.parse().ok()?;
        pid = *children(pid).get(index)?;
    }
    Some(pid)
}

/// The children of `pid` (of all its threads), in start order.
fn children(pid: u32) -> Vec<u32> {
    let mut found: Vec<(u64, u32)> = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("children")) else { continue };
        for child in text.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
            found.push((start_time(child).unwrap_or(u64::MAX), child));
        }
    }
    found.sort_unstable();
    found.into_iter().map(|(_, pid)| pid).collect()
}

/// Field 22 of `/proc/PID/stat`: the start time in clock ticks after boot.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; fields after it are plain.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}
