//! Boundary searches over a monotone predicate: the largest value that fits, and the first
//! candidate in an ordered list that fits.
//!
//! Memory grows with sessions, context and batch, and shrinks with more devices or a smaller
//! precision, so "fits" is monotone in each of them. The searches rely on that and nothing else:
//! they bracket the boundary and bisect it. The evaluator's margin (bytes free, or bytes over)
//! only chooses *where* to probe next: memory is close to linear in these parameters, so a secant
//! step through two probes usually lands on the boundary at once; when it does not shrink the
//! bracket by half, the next probe is the midpoint, so the search never takes more than about
//! twice the probes of plain bisection. The answer is always proven by the probes themselves:
//! the value fits, and the next one was evaluated and does not (or is the limit).

/// What one evaluation says: whether it fits, and by how many bytes (free when positive, over
/// when negative), which only guides the next probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub fits: bool,
    pub margin: i128,
}

/// Where the boundary lies in `1..=limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boundary {
    /// `value` fits and `value + 1` does not.
    Largest(u64),
    /// Every value up to the limit fits (the limit is the checker's range for the field).
    Limit(u64),
    /// Even 1 does not fit.
    NoneFits,
}

/// The most probes one search may take; bracketing doubles its step and bisection halves the
/// bracket, so 64-bit values need at most about 4 × 64.
const MAX_PROBES: u32 = 512;

/// The largest `x` in `1..=limit` for which `probe(x)` fits, starting from `start`. `probe`
/// must be monotone: fits up to some value, fails beyond it. Errors from `probe` end the search.
pub fn largest<E>(
    start: u64,
    limit: u64,
    mut probe: impl FnMut(u64) -> Result<Probe, E>,
) -> Result<Boundary, E> {
    let limit = limit.max(1);
    let start = start.clamp(1, limit);
    // The best fitting and the best failing points known so far.
    let mut lo: Option<(u64, i128)> = None;
    let mut hi: Option<(u64, i128)> = None;
    // The previous probe on the same side, for a secant step while the bracket is open.
    let mut previous: Option<(u64, i128)> = None;
    let mut x = start;
    let mut width = u64::MAX;
    for _ in 0..MAX_PROBES {
        let p = probe(x)?;
        if p.fits {
            if lo.is_none_or(|(l, _)| x > l) {
                previous = lo;
                lo = Some((x, p.margin));
            }
        } else if hi.is_none_or(|(h, _)| x < h) {
            previous = hi;
            hi = Some((x, p.margin));
        }
        x = match (lo, hi) {
            (Some((l, _)), Some((h, _))) if h - l <= 1 => return Ok(Boundary::Largest(l)),
            (Some((l, ml)), Some((h, mh))) => {
                // Interpolate while that keeps halving the bracket; otherwise bisect once.
                // A midpoint leaves ceil(width / 2): that counts as halved.
                let halved = h - l <= width.div_ceil(2);
                width = h - l;
                let mid = l + (h - l) / 2;
                if halved { secant_between((l, ml), (h, mh)).unwrap_or(mid) } else { mid }
            }
            (Some((l, ml)), None) => {
                if l >= limit {
                    return Ok(Boundary::Limit(limit));
                }
                // Probe the first value predicted to fail. Alone, probe the next value to
                // learn the slope; when a prediction fell short, at least double the step.
                match previous {
                    // A step of about 1/64 of the value: enough to see a block-rounded cache
                    // (16-token vLLM blocks) move, small enough to stay near the start.
                    None => l.saturating_add((l / 64).max(1)).min(limit),
                    Some(prev) => {
                        let doubled = l.saturating_add(l.abs_diff(prev.0).saturating_mul(2));
                        let guess =
                            extrapolate(prev, (l, ml)).map_or(doubled, |g| g.saturating_add(1));
                        guess.max(l + 1).max(doubled.min(limit)).min(limit)
                    }
                }
            }
            (None, Some((h, mh))) => {
                if h <= 1 {
                    return Ok(Boundary::NoneFits);
                }
                // Probe the last value predicted to fit, with the same safeguards downward.
                match previous {
                    None => h.saturating_sub((h / 64).max(1)).max(1),
                    Some(prev) => {
                        let doubled = h.saturating_sub(h.abs_diff(prev.0).saturating_mul(2)).max(1);
                        let guess = extrapolate(prev, (h, mh)).unwrap_or(doubled);
                        guess.min(h - 1).min(doubled).max(1)
                    }
                }
            }
            (None, None) => unreachable!("every probe lands on one side"),
        };
    }
    // Not reached for a monotone probe; answer with what is proven to fit.
    Ok(lo.map_or(Boundary::NoneFits, |(l, _)| Boundary::Largest(l)))
}

/// The value where the line through two probes crosses zero margin, rounded down: the last
/// value predicted to fit. `None` when the margin does not fall between them.
fn extrapolate((x1, m1): (u64, i128), (x2, m2): (u64, i128)) -> Option<u64> {
    let dx = i128::from(x2) - i128::from(x1);
    let dm = m2 - m1;
    // Memory must grow with the value: the margin falls as x rises.
    if dx == 0 || dm == 0 || (dm < 0) == (dx < 0) {
        return None;
    }
    // The margin line m2 + (dm / dx)(x - x2) is zero at x2 - m2·dx/dm; round down.
    let (mut num, mut den) = (m2.checked_mul(dx)?.checked_neg()?, dm);
    if den < 0 {
        (num, den) = (num.checked_neg()?, den.checked_neg()?);
    }
    let zero = i128::from(x2).checked_add(num.div_euclid(den))?;
    u64::try_from(zero.max(1)).ok()
}

/// A probe strictly inside the bracket `(lo, hi)` at the predicted boundary, or `None` when
/// the prediction falls on or outside the bracket's ends: a margin that is flat near the
/// boundary (a cache rounded to whole blocks) would otherwise creep one value at a time.
fn secant_between(lo: (u64, i128), hi: (u64, i128)) -> Option<u64> {
    let guess = extrapolate(lo, hi)?;
    (guess > lo.0 && guess < hi.0).then_some(guess)
}

/// The first index in `0..len` whose candidate fits, when candidates are ordered so that once
/// one fits every later one does. `None` when none fits. Galloping, then bisection: the
/// candidates are probed at 0, 1, 3, 7, ... until one fits, then the gap is bisected, so the
/// cost follows the answer's index rather than the list's length (the last candidates of a
/// device list are hundreds of GPUs, each a budget to evaluate). A candidate list has no margin
/// to interpolate over (a precision or a split is not a number line).
pub fn first_fitting<E>(
    len: usize,
    mut fits: impl FnMut(usize) -> Result<bool, E>,
) -> Result<Option<usize>, E> {
    if len == 0 {
        return Ok(None);
    }
    if fits(0)? {
        return Ok(Some(0));
    }
    // Invariant: `failed` does not fit; `hi`, once found, fits.
    let (mut failed, mut step) = (0usize, 1usize);
    let mut hi = loop {
        let probe = failed.saturating_add(step).min(len - 1);
        if fits(probe)? {
            break probe;
        }
        if probe == len - 1 {
            return Ok(None);
        }
        failed = probe;
        step = step.saturating_mul(2);
    };
    while hi - failed > 1 {
        let mid = failed + (hi - failed) / 2;
        if fits(mid)? {
            hi = mid;
        } else {
            failed = mid;
        }
    }
    Ok(Some(hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A linear memory model with a fixed part: fits while `base + per × x <= capacity`.
    fn linear(base: i128, per: i128, capacity: i128) -> impl FnMut(u64) -> Result<Probe, ()> {
        move |x| {
            let margin = capacity - base - per * i128::from(x);
            Ok(Probe { fits: margin >= 0, margin })
        }
    }

    #[test]
    fn finds_the_boundary_of_linear_models_from_any_start() {
        for (base, per, capacity) in [(10, 3, 100), (0, 1, 1), (5, 7, 4), (1, 1, 1_000_000)] {
            let truth = (capacity - base) / per;
            for start in [1, 2, 17, 1000, 5_000_000] {
                let found = largest(start, 10_000_000, linear(base, per, capacity)).unwrap();
                let expected = if truth < 1 {
                    Boundary::NoneFits
                } else {
                    Boundary::Largest(u64::try_from(truth).unwrap())
                };
                assert_eq!(found, expected, "base {base} per {per} cap {capacity} from {start}");
            }
        }
    }

    #[test]
    fn reports_the_limit_when_everything_fits() {
        assert_eq!(largest(3, 64, linear(0, 1, 1000)).unwrap(), Boundary::Limit(64));
    }

    #[test]
    fn survives_a_margin_that_lies() {
        // Fits below 37, but the margin is constant: the search must still find it.
        let found = largest(5, 1 << 40, |x| {
            Ok::<_, ()>(Probe { fits: x <= 37, margin: if x <= 37 { 1 } else { -1 } })
        })
        .unwrap();
        assert_eq!(found, Boundary::Largest(37));
    }

    #[test]
    fn linear_models_need_few_probes() {
        let mut probes = 0;
        let found = largest(4, 1_000_000, |x| {
            probes += 1;
            let margin = 80_000 - 15_000 - 128 * i128::from(x);
            Ok::<_, ()>(Probe { fits: margin >= 0, margin })
        })
        .unwrap();
        assert_eq!(found, Boundary::Largest(507));
        assert!(probes <= 5, "{probes} probes");
    }

    #[test]
    fn first_fitting_bisects_an_ordered_list() {
        for boundary in 0..10 {
            let found = first_fitting(10, |i| Ok::<_, ()>(i >= boundary)).unwrap();
            assert_eq!(found, Some(boundary));
        }
        assert_eq!(first_fitting(10, |_| Ok::<_, ()>(false)).unwrap(), None);
        // The cost follows the answer, not the list: an early answer in a long list is cheap.
        let mut probes = 0;
        let found = first_fitting(1000, |i| {
            probes += 1;
            Ok::<_, ()>(i >= 2)
        })
        .unwrap();
        assert_eq!(found, Some(2));
        assert!(probes <= 4, "{probes} probes");
        assert_eq!(first_fitting(0, |_| Ok::<_, ()>(true)).unwrap(), None);
    }
}
