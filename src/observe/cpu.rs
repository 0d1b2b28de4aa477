//! CPU time the pipeline's threads used, from the kernel's own accounting of each thread
//! (`getrusage(RUSAGE_THREAD)`, Linux; elsewhere nothing is reported).
//!
//! Why, beside the stages' busy fractions: a busy fraction is wall-clock time inside a stage,
//! which counts a thread that sleeps on a GPU event, waits for a lock or is descheduled as
//! busy. The kernel's figures say how much of that was on a CPU, and how much of it in the
//! kernel (reading and writing files is mostly kernel time). On the H200 host (12 000 × 512²,
//! GPU PNG, ad hoc build, session 30) they put the shared threads on a CPU 94 % of their time,
//! three quarters of it in the kernel, and the four render workers at a quarter of one core
//! between them while the stages called them 60–70 % busy (BENCHMARKS.md, "GPU encoders").
//!
//! Time off a CPU is either sleep (waiting for work, a slot, a lock) or waiting on a run queue
//! for a core while runnable; the scheduler's own figure of the second
//! (`/proc/thread-self/schedstat`, Linux with scheduler statistics) tells a thread starved of
//! cores from one starved of work.

use std::time::{Duration, Instant};

/// CPU time one thread used, split as the kernel accounts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTime {
    /// Time running the program's own code.
    pub user: Duration,
    /// Time in the kernel on the thread's behalf (system calls, page faults).
    pub system: Duration,
}

impl CpuTime {
    /// The calling thread's CPU time so far; `None` where the platform does not account it
    /// per thread.
    pub fn of_this_thread() -> Option<CpuTime> {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: rusage is plain old data, for which all zeroes is a valid value.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: `usage` is a valid, writable rusage; RUSAGE_THREAD asks for the calling
            // thread only.
            if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
                return None;
            }
            Some(CpuTime {
                user: duration_of(usage.ru_utime),
                system: duration_of(usage.ru_stime),
            })
        }
        #[cfg(not(target_os = "linux"))]
        None
    }

    /// User and system time together.
    pub fn total(&self) -> Duration {
        self.user + self.system
    }
}

#[cfg(target_os = "linux")]
fn duration_of(t: libc::timeval) -> Duration {
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let micros = u32::try_from(t.tv_usec).unwrap_or(0).min(999_999);
    Duration::new(secs, micros * 1000)
}

/// What one thread used over its life: its CPU time and how long it lived.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadUse {
    pub cpu: CpuTime,
    pub lifetime: Duration,
    /// Time it was runnable but waited on a run queue for a core; `None` where the kernel
    /// does not say.
    pub runqueue: Option<Duration>,
}

/// The calling thread's time spent waiting on a run queue so far (the second figure of
/// `/proc/thread-self/schedstat`, in nanoseconds).
fn runqueue_wait_of_this_thread() -> Option<Duration> {
    #[cfg(target_os = "linux")]
    {
        let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        runqueue_wait_in(&text)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// The run-queue wait in a `schedstat` line: "<on-CPU ns> <run-queue ns> <time slices>".
fn runqueue_wait_in(schedstat: &str) -> Option<Duration> {
    let mut fields = schedstat.split_ascii_whitespace();
    let _on_cpu = fields.next()?;
    let waited: u64 = fields.next()?.parse().ok()?;
    fields.next()?;
    Some(Duration::from_nanos(waited))
}

/// Measures the calling thread from its start: made first thing in a thread, asked last.
pub struct ThreadMeter {
    born: Instant,
    /// The run-queue wait before `born` (a new thread may wait for its first turn on a core):
    /// not part of the lifetime measured, so not counted.
    waited_before: Option<Duration>,
}

impl ThreadMeter {
    /// Starts measuring the calling thread's lifetime (its CPU time counts from its creation).
    pub fn start() -> ThreadMeter {
        ThreadMeter {
            waited_before: runqueue_wait_of_this_thread(),
            born: Instant::now(),
        }
    }

    /// What the calling thread used since it started; `None` where it is not accounted.
    pub fn finish(self) -> Option<ThreadUse> {
        let waited = match (runqueue_wait_of_this_thread(), self.waited_before) {
            (Some(now), Some(before)) => Some(now.saturating_sub(before)),
            _ => None,
        };
        CpuTime::of_this_thread().map(|cpu| {
            let lifetime = self.born.elapsed();
            ThreadUse {
                cpu,
                lifetime,
                runqueue: waited.map(|w| within_time_off_cpu(w, lifetime, cpu)),
            }
        })
    }
}

/// A thread's run-queue wait, at most the part of its life it was off a CPU.
///
/// The scheduler adds a wait to a thread's figure when the wait ends, on its own clock, and
/// a figure read by the running thread can lag or lead a short life by a few milliseconds:
/// measured on a loaded 2-core host, threads living 1-5 ms read as much as 2.3 ms more
/// (on a CPU + waiting) than they lived. Over the lives of a real run's threads (tenths of a
/// second and more) the error is small; for a thread of a few hundred microseconds it would
/// be most of the figure, so the figure is bounded by what is physically possible.
fn within_time_off_cpu(waited: Duration, lifetime: Duration, cpu: CpuTime) -> Duration {
    waited.min(lifetime.saturating_sub(cpu.total()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins for `d` of wall time (on a CPU, barring preemption).
    fn spin(d: Duration) -> u64 {
        let until = Instant::now() + d;
        let mut x = 0u64;
        while Instant::now() < until {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        x
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_spinning_thread_is_on_a_cpu_and_a_sleeping_one_is_not() {
        let spun = measured(|| {
            std::hint::black_box(spin(Duration::from_millis(120)));
        });
        let slept = measured(|| std::thread::sleep(Duration::from_millis(120)));
        // Spinning: at least some of its 120 ms on a CPU, even on a loaded 2-core machine
        // (the other threads of the test binary compete for the cores).
        assert!(spun.cpu.total() >= Duration::from_millis(20), "{spun:?}");
        assert!(spun.lifetime >= Duration::from_millis(120), "{spun:?}");
        // Sleeping: next to nothing.
        assert!(slept.cpu.total() < Duration::from_millis(20), "{slept:?}");
        assert!(slept.lifetime >= Duration::from_millis(120), "{slept:?}");
    }

    /// What a new thread used doing `work`, metered as the pipeline's threads are.
    #[cfg(target_os = "linux")]
    fn measured(work: impl FnOnce() + Send + 'static) -> ThreadUse {
        let used = std::thread::spawn(|| {
            let meter = ThreadMeter::start();
            work();
            meter.finish()
        })
        .join()
        .ok()
        .flatten();
        used.unwrap_or_else(|| panic!("no per-thread CPU time"))
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn system_time_is_what_the_kernel_does_for_the_thread() {
        let used = measured(|| {
            // Kernel work: system calls, nothing else.
            let until = Instant::now() + Duration::from_millis(150);
            while Instant::now() < until {
                let _ = std::hint::black_box(std::fs::metadata("/"));
            }
        });
        assert!(used.cpu.system > Duration::ZERO, "{used:?}");
    }

    #[test]
    fn the_run_queue_wait_is_the_second_schedstat_figure() {
        assert_eq!(
            runqueue_wait_in("1234567 89000 42\n"),
            Some(Duration::from_nanos(89_000))
        );
        assert_eq!(runqueue_wait_in("1234567 89000"), None);
        assert_eq!(runqueue_wait_in("1234567 x 42"), None);
        assert_eq!(runqueue_wait_in(""), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_thread_never_waits_longer_for_a_core_than_it_lives() {
        let used = measured(|| {
            std::hint::black_box(spin(Duration::from_millis(30)));
            std::thread::sleep(Duration::from_millis(30));
        });
        // Kernels without scheduler statistics say nothing; those with them, a wait within
        // the time the thread was off a CPU.
        if let Some(waited) = used.runqueue {
            assert!(waited + used.cpu.total() <= used.lifetime, "{used:?}");
        }
    }

    #[test]
    fn a_wait_read_beyond_the_time_off_a_cpu_is_cut_to_it() {
        let ms = Duration::from_millis;
        let cpu = CpuTime {
            user: ms(2),
            system: ms(1),
        };
        // Within the 7 ms off a CPU: as read.
        assert_eq!(within_time_off_cpu(ms(4), ms(10), cpu), ms(4));
        assert_eq!(within_time_off_cpu(ms(7), ms(10), cpu), ms(7));
        // Beyond it (the scheduler's figure ran ahead of a short life): cut to it.
        assert_eq!(within_time_off_cpu(ms(9), ms(10), cpu), ms(7));
        // A life spent all on a CPU (CPU time counts from the thread's creation, so it can
        // exceed the life measured): no wait.
        assert_eq!(within_time_off_cpu(ms(1), ms(2), cpu), Duration::ZERO);
    }
}
