//! Which command a GPU process belongs to: the command's own process or any descendant.
//!
//! NVML lists processes by pid. A pid NVML shows for the first time is attributed at once, so no
//! sample of its memory is missed: its parent chain in Linux's `/proc/PID/stat` is walked up to a
//! command's pid; a process whose chain breaks (its parent exited, so it was re-parented to
//! init) belongs to the command whose process group it is in (each command runs in a group of its
//! own, which forks inherit). The answer is remembered, so a 1 kHz sampler reads `/proc` only
//! when a new process appears on a GPU.
//!
//! Besides, [`Attribution::refresh`] walks each command's process tree from the top at a much
//! lower rate ([`REFRESH`]), and only when a process was created since the last walk (the newest
//! pid in `/proc/loadavg` changed), so a large tree costs nothing while it is stable: a
//! descendant seen there is remembered as the command's even if it later leaves the process group
//! (`setsid`) and its parent exits before it touches a GPU.
//! A pid that cannot be traced to a command (another container's pid namespace, a process that
//! already exited) belongs to no command and is counted among other processes.

use std::collections::HashMap;
use std::time::Duration;

/// How often the commands' process trees are walked from the top.
pub const REFRESH: Duration = Duration::from_millis(100);

/// How many parents are followed before giving up.
const MAX_DEPTH: usize = 256;

/// How many descendants a refresh records, per command.
const MAX_TREE: usize = 4096;

#[derive(Debug, Default)]
pub struct Attribution {
    /// The pid of each command, by command index (0 before it starts).
    roots: Vec<u32>,
    known: HashMap<u32, Option<usize>>,
    /// The newest pid on the system at the last walk of the trees.
    walked_at_pid: Option<u32>,
}

/// What `/proc/PID/stat` says about a process's place in the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub parent: u32,
    pub group: u32,
}

impl Attribution {
    pub fn new(roots: Vec<u32>) -> Attribution {
        Attribution { roots, known: HashMap::new(), walked_at_pid: None }
    }

    /// Replaces the commands' pids (a command started). What was concluded without them is
    /// forgotten: a process of the new command may have been taken for another's.
    pub fn set_roots(&mut self, roots: &[u32]) {
        self.roots.clear();
        self.roots.extend_from_slice(roots);
        self.known.clear();
        self.walked_at_pid = None;
    }

    fn root_index(&self, pid: u32) -> Option<usize> {
        if pid == 0 {
            return None;
        }
        self.roots.iter().position(|root| *root == pid)
    }

    /// The command `pid` belongs to, if any.
    ///
    /// A descendant of the probe whose root is not registered yet (a sample taken between `fork`
    /// and the probe recording the pid) is [`Owner::Starting`] and not remembered.
    pub fn owner(&mut self, pid: u32) -> Owner {
        if let Some(found) = self.known.get(&pid) {
            return found.map_or(Owner::Other, Owner::Command);
        }
        let probe = std::process::id();
        let mut current = pid;
        let mut group = None;
        let mut found = None;
        for _ in 0..MAX_DEPTH {
            if let Some(index) = self.root_index(current) {
                found = Some(index);
                break;
            }
            let Some(stat) = stat(current) else { break };
            group.get_or_insert(stat.group);
            match stat.parent {
                parent if parent == probe => return Owner::Starting,
                parent if parent > 1 => current = parent,
                _ => break,
            }
        }
        // The chain broke: the process group still tells (a fork whose parent exited).
        let found = found.or_else(|| group.and_then(|g| self.root_index(g)));
        self.known.insert(pid, found);
        found.map_or(Owner::Other, Owner::Command)
    }

    /// Walks every command's process tree from its root and remembers each descendant, unless
    /// no process was created since the last walk.
    pub fn refresh(&mut self) {
        let newest = newest_pid();
        if newest.is_some() && newest == self.walked_at_pid {
            return;
        }
        self.walked_at_pid = newest;
        for index in 0..self.roots.len() {
            let root = self.roots[index];
            if root == 0 {
                continue;
            }
            let mut stack = vec![root];
            let mut seen = 0;
            while let Some(pid) = stack.pop() {
                self.known.insert(pid, Some(index));
                seen += 1;
                if seen >= MAX_TREE {
                    break;
                }
                children(pid, &mut stack);
            }
        }
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

/// Fields 4 and 5 of `/proc/PID/stat`: the parent's pid and the process group.
pub fn stat(pid: u32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; the fields after it are plain.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = rest.split_whitespace().skip(1);
    Some(Stat { parent: fields.next()?.parse().ok()?, group: fields.next()?.parse().ok()? })
}

/// Whether `pid` runs: it is in `/proc` and not a zombie (field 3 of its stat, `Z` or `X`).
pub fn alive(pid: u32) -> bool {
    state(pid).is_some_and(|s| !matches!(s, 'Z' | 'X' | 'x'))
}

fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.get(stat.rfind(')')? + 2..)?.chars().next()
}

/// The parent's pid, from `/proc/PID/stat`.
pub fn parent(pid: u32) -> Option<u32> {
    stat(pid).map(|s| s.parent)
}

/// The last field of `/proc/loadavg`: the pid most recently given to a new process.
fn newest_pid() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().nth(4)?.parse().ok()
}

/// Pushes the children of `pid` (of all its threads) onto `out`.
fn children(pid: u32, out: &mut Vec<u32>) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("children")) else { continue };
        out.extend(text.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
    }
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

    #[test]
    fn the_process_group_claims_a_fork_whose_parent_exited() {
        use std::os::unix::process::CommandExt;
        // `sh` forks `sleep` and exits: the sleep is re-parented, but stays in sh's group.
        let sh = std::process::Command::new("sh")
            .args(["-c", "sleep 5 >/dev/null 2>&1 & echo $!"])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("sh runs");
        let sh_pid = sh.id();
        let output = sh.wait_with_output().expect("sh ends");
        let orphan: u32 = String::from_utf8_lossy(&output.stdout).trim().parse().expect("a pid");
        let orphan_stat = stat(orphan).expect("the orphan runs");
        let mut tree = Attribution::new(vec![u32::MAX - 7, sh_pid]);
        let owner = tree.owner(orphan);
        let _ = std::process::Command::new("kill").arg(orphan.to_string()).status();
        assert_ne!(orphan_stat.parent, sh_pid, "sh has exited");
        assert_eq!(orphan_stat.group, sh_pid);
        assert_eq!(owner, Owner::Command(1));
    }

    #[test]
    fn a_refresh_remembers_the_tree_below_a_root() {
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep").arg("5").spawn().expect("sleep runs");
        let mut tree = Attribution::new(vec![me]);
        tree.refresh();
        assert_eq!(tree.known.get(&child.id()), Some(&Some(0)));
        let _ = child.kill();
        let _ = child.wait();
    }
}
