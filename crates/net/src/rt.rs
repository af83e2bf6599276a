//! Background threads that run async code: each owns a current-thread tokio
//! runtime, so its work never competes with the taps' runtimes.

use std::future::Future;
use std::thread::JoinHandle;

/// Starts a named thread that runs the future `make` returns on a runtime
/// of its own, until the future ends (or the process does). A runtime that
/// cannot be built ends the thread at once. The handle joins the thread.
pub fn spawn_async_thread<F, Fut>(name: &str, make: F) -> std::io::Result<JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(make());
        })
}

/// Blocks the calling thread until SIGINT or SIGTERM: the foreground of the
/// helper servers (`tokentap sim`, `tokentap gateway`), which have nothing
/// to drain, so both signals stop them at once — also as PID 1 in a
/// container, where an unhandled SIGTERM would be ignored.
pub fn block_until_stopped() -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    })
}
