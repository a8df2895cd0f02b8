//! Runs independent replay units on a few worker threads (one per core): a replay is
//! single-threaded, and the evaluation has dozens of them.

use std::sync::Mutex;

/// Run `work` on every unit with `jobs` threads. Units are taken from the end of `units`, so put
/// the largest last to finish together. Results come back in no particular order; the first
/// error (if any) is returned after every worker stopped.
pub fn run_units<U: Send, R: Send>(
    jobs: usize,
    units: Vec<U>,
    work: impl Fn(U) -> anyhow::Result<R> + Sync,
) -> anyhow::Result<Vec<R>> {
    let queue = Mutex::new(units);
    let results = Mutex::new(Vec::new());
    let errors: Mutex<Vec<anyhow::Error>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let Some(unit) = queue.lock().unwrap_or_else(|p| p.into_inner()).pop() else {
                    break;
                };
                match work(unit) {
                    Ok(r) => results.lock().unwrap_or_else(|p| p.into_inner()).push(r),
                    Err(e) => errors.lock().unwrap_or_else(|p| p.into_inner()).push(e),
                }
            });
        }
    });
    if let Some(e) = errors.into_inner().unwrap_or_else(|p| p.into_inner()).pop() {
        return Err(e);
    }
    Ok(results.into_inner().unwrap_or_else(|p| p.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_runs_once_and_errors_come_back() {
        let mut out = run_units(2, (0..50).collect(), |i: u32| Ok(i * 2)).unwrap();
        out.sort_unstable();
        assert_eq!(out, (0..50).map(|i| i * 2).collect::<Vec<_>>());
        let err = run_units(2, vec![1, 2, 3], |i: u32| {
            anyhow::ensure!(i != 2, "unit {i} failed");
            Ok(i)
        })
        .unwrap_err();
        assert!(err.to_string().contains("unit 2"));
    }
}
