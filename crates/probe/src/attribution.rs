//! Which command a GPU process belongs to: the command's own process or any descendant.
//!
//! NVML lists processes by pid. A pid is attributed by walking its parent chain in Linux's
//! `/proc/PID/stat` up to a command's pid. Each pid is walked once and remembered, so a 1 kHz
//! sampler reads `/proc` only when a new process appears on a GPU. A pid whose chain cannot be
//! read (another container's pid namespace, a process that already exited) belongs to no command
//! and is counted among other processes.

use std::collections::BTreeMap;

/// How many parents are followed before giving up.
const MAX_DEPTH: usize = 256;

#[derive(Debug, Default)]
pub struct Attribution {
    /// The pid of each command, by command index.
    roots: Vec<u32>,
    known: BTreeMap<u32, Option<usize>>,
}

impl Attribution {
    pub fn new(roots: Vec<u32>) -> Attribution {
        Attribution { roots, known: BTreeMap::new() }
    }

    /// The command `pid` belongs to, if any.
    ///
    /// The walk stops at the probe's own child, which is a command's root. A descendant of the
    /// probe whose root is not registered yet (a sample taken between `fork` and the probe
    /// recording the pid) belongs to no command for now and is not remembered.
    pub fn owner(&mut self, pid: u32) -> Owner {
        if let Some(found) = self.known.get(&pid) {
            return found.map_or(Owner::Other, Owner::Command);
        }
        let probe = std::process::id();
        let mut current = pid;
        for _ in 0..MAX_DEPTH {
            if let Some(index) = self.roots.iter().position(|root| *root == current) {
                self.known.insert(pid, Some(index));
                return Owner::Command(index);
            }
            match parent(current) {
                Some(next) if next == probe => return Owner::Starting,
                Some(next) if next > 1 => current = next,
                _ => break,
            }
        }
        self.known.insert(pid, None);
        Owner::Other
    }
}

/// Who a GPU process belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Command `i` (itself or a descendant).
    Command(usize),
    /// A command that is starting and not registered yet.
    Starting,
    /// Another process.
    Other,
}

/// Field 4 of `/proc/PID/stat`: the parent's pid.
pub fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; the fields after it are plain.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_and_its_parent() {
        let me = std::process::id();
        let parent_pid = parent(me).expect("this test's parent");
        let mut by_parent = Attribution::new(vec![parent_pid]);
        assert_eq!(by_parent.owner(me), Owner::Command(0));
        let mut unrelated = Attribution::new(vec![u32::MAX]);
        assert_eq!(unrelated.owner(me), Owner::Other);
        assert_eq!(unrelated.owner(u32::MAX - 1), Owner::Other);
    }
}
