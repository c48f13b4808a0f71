//! One binary holds every end-to-end test (`tests/tests/e2e/`, a module per area); they run as
//! when each area was a binary of its own: tests of one area side by side (`--test-threads`),
//! never beside a test of another area. Each test opens with
//! `let _area = ferry_tests::area(module_path!());`: it waits while another area's tests run.
//!
//! Why: the areas start browsers, clusters and network namespaces sized for a 2-core machine
//! with nothing else running; two areas at once would starve each other's encoders and timers.

use std::sync::{Condvar, Mutex, MutexGuard};

struct State {
    /// The area whose tests run now, and how many of them.
    running: Option<(&'static str, usize)>,
}

static STATE: Mutex<State> = Mutex::new(State { running: None });
static CHANGED: Condvar = Condvar::new();

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Held for the length of a test: no test of another area runs meanwhile.
#[derive(Debug)]
pub struct AreaGuard {
    area: &'static str,
}

/// Waits until no test of another area than `area` runs, then counts this one in. `area` is
/// the test's module path (`module_path!()`); its last segment names the area.
pub fn area(module: &'static str) -> AreaGuard {
    let area = module.rsplit("::").next().unwrap_or(module);
    let mut s = state();
    loop {
        match &mut s.running {
            None => {
                s.running = Some((area, 1));
                break;
            }
            Some((a, n)) if *a == area => {
                *n += 1;
                break;
            }
            Some(_) => s = CHANGED.wait(s).unwrap_or_else(|e| e.into_inner()),
        }
    }
    AreaGuard { area }
}

impl Drop for AreaGuard {
    fn drop(&mut self) {
        let mut s = state();
        if let Some((a, n)) = &mut s.running
            && *a == self.area
        {
            *n -= 1;
            if *n == 0 {
                s.running = None;
            }
        }
        CHANGED.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn areas_never_overlap_and_one_area_runs_side_by_side() {
        // Two threads of area a overlap; b waits for both to end.
        let a_running = Arc::new(AtomicUsize::new(0));
        let overlap_seen = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for _ in 0..2 {
            let (r, o) = (a_running.clone(), overlap_seen.clone());
            threads.push(std::thread::spawn(move || {
                let _g = area("e2e::a");
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                o.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(100));
                r.fetch_sub(1, Ordering::SeqCst);
            }));
        }
        std::thread::sleep(Duration::from_millis(20));
        let r = a_running.clone();
        let b = std::thread::spawn(move || {
            let _g = area("e2e::b");
            r.load(Ordering::SeqCst)
        });
        assert_eq!(b.join().ok(), Some(0), "b ran while a did");
        for t in threads {
            let _ = t.join();
        }
        assert_eq!(
            overlap_seen.load(Ordering::SeqCst),
            2,
            "a's tests side by side"
        );
    }
}
