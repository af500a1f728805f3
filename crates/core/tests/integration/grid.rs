//! Fit maps against full evaluations: for every inference check in `examples/`, on several
//! catalog devices, every cell of a small grid must have the verdict that parsing, checking and
//! evaluating the file with that context and those sessions written in gives.

use vram_core::eval::grid::{self, FitMap, Grid, GridError};

const CONTEXTS: [u64; 6] = [512, 2048, 8192, 32768, 65536, 131_072];
const SESSIONS: [u64; 6] = [1, 2, 8, 24, 64, 256];
const DEVICES: [&str; 5] = ["l4", "rtx-4090", "a100-sxm4-80gb", "h100-sxm-80gb", "h200-sxm"];

fn examples() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            (path.display().to_string(), std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// `source` with every workload's `context` and `sessions` lines set to the given values.
fn rewritten(source: &str, context: u64, sessions: u64) -> String {
    source
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            let indent = &line[..line.len() - trimmed.len()];
            if trimmed.starts_with("context ") {
                format!("{indent}context {context} tokens")
            } else if trimmed.starts_with("sessions ") {
                format!("{indent}sessions {sessions}")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The verdict a full evaluation of the rewritten file gives for `check` on `device`.
fn full(source: &str, check: &str, device: &str, context: u64, sessions: u64) -> bool {
    let (program, _) = grid::program(&rewritten(source, context, sessions));
    let grid = Grid::new(&program, check).unwrap();
    grid.on_device(device).is_ok_and(|budget| budget.verdict.fits())
}

#[test]
fn every_cell_agrees_with_a_full_evaluation() {
    let mut maps = 0;
    let mut crossing = 0;
    for (name, source) in examples() {
        let (program, _) = grid::program(&source);
        for check in program.checks() {
            let Ok(grid) = Grid::new(&program, &check.id) else { continue };
            for device in DEVICES {
                let map = grid.fit_map(device, &CONTEXTS, &SESSIONS).unwrap();
                maps += 1;
                let fitting = map.boundary.iter().map(|&b| b as usize).sum::<usize>();
                if fitting > 0 && fitting < CONTEXTS.len() * SESSIONS.len() {
                    crossing += 1;
                }
                for (row, &context) in CONTEXTS.iter().enumerate() {
                    for (column, &sessions) in SESSIONS.iter().enumerate() {
                        assert_eq!(
                            map.fits(row, column),
                            full(&source, &check.id, device, context, sessions),
                            "{name}: `{}` on {device} at {context} tokens x {sessions}",
                            check.id
                        );
                    }
                }
            }
        }
    }
    // The test means something only if some maps have both fitting and failing cells.
    assert!(maps >= 40, "only {maps} maps");
    assert!(crossing >= 10, "only {crossing} maps cross their boundary");
}

#[test]
fn the_written_check_on_its_own_device_matches_evaluate() {
    for (name, source) in examples() {
        let outcome = vram_core::evaluate(&source);
        let (program, _) = grid::program(&source);
        for budget in &outcome.budget.checks {
            let Ok(grid) = Grid::new(&program, &budget.id) else { continue };
            let device = &budget.devices[0].device;
            if budget.devices.iter().any(|d| &d.device != device) {
                continue;
            }
            let mut expected = budget.clone();
            let again = grid.on_device(device).unwrap();
            // A check on a declared machine names the machine; on_device names the devices, so
            // the machine's host RAM and disk lines are not its business. Suggestions are the
            // planner's, added after evaluation.
            expected.target.clone_from(&again.target);
            expected.host.clone_from(&again.host);
            expected.suggestions.clone_from(&again.suggestions);
            assert_eq!(again, expected, "{name}: {}", budget.id);
        }
    }
}

#[test]
fn boundaries_never_grow_and_cells_match_them() {
    let source = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/llama3.1-8b-chat.vram"
    ))
    .unwrap();
    let (program, _) = grid::program(&source);
    let grid = Grid::new(&program, "chat-l4").unwrap();
    let contexts: Vec<u64> = (1..=60).map(|i| i * 2048).collect();
    let sessions: Vec<u64> = (1..=56).collect();
    let map: FitMap = grid.fit_map("l4", &contexts, &sessions).unwrap();
    assert!(map.boundary.windows(2).all(|w| w[0] >= w[1]), "{:?}", map.boundary);
    assert!(map.boundary[0] > 0 && map.boundary[59] == 0, "{:?}", map.boundary);
    let cells = map.cells();
    assert_eq!(cells.len(), 60 * 56);
    let fitting: usize = cells.iter().map(|&c| usize::from(c)).sum();
    assert_eq!(fitting, map.boundary.iter().map(|&b| b as usize).sum::<usize>());
    // Far fewer evaluations than cells.
    assert!(map.evaluations < 400, "{} evaluations", map.evaluations);
}

#[test]
fn mistakes_are_errors_not_panics() {
    let source = "workload w { model llama3.1-8b\n inference { weights bf16\n context 8192 tokens } }\ncheck w on l4\n";
    let (program, _) = grid::program(source);
    assert!(matches!(Grid::new(&program, "nope"), Err(GridError::UnknownCheck(_))));
    let grid = Grid::new(&program, "w").unwrap();
    assert!(matches!(grid.fit_map("no-such-gpu", &[1], &[1]), Err(GridError::UnknownDevice(_))));
    for (contexts, sessions) in [
        (&[][..], &[1][..]),
        (&[2, 1][..], &[1][..]),
        (&[1][..], &[0][..]),
        (&[1][..], &[2_000_000][..]),
    ] {
        assert!(matches!(grid.fit_map("l4", contexts, sessions), Err(GridError::Axis(_))));
    }
    let fp8 = source.replace("bf16", "fp8");
    let (program, _) = grid::program(&fp8);
    let map = Grid::new(&program, "w").unwrap().fit_map("v100-sxm2-32gb", &[1024], &[1]).unwrap();
    assert!(map.unsupported.is_some() && map.boundary == [0], "{map:?}");
}
