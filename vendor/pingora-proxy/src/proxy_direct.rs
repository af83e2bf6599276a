// Patch carried by tokentap (not part of pingora 0.9.1): a relay for one
// HTTP/1 request to an HTTP/1 upstream that runs in one future, without the
// two task channels of `proxy_1to1`. It is taken only where the channel
// machinery buys nothing: an HTTP/1.x downstream, no cache, no upgrade, no
// custom messages. Every hook runs as in `proxy_1to1`, in the same order,
// through the same functions (`h1_response_filter`, `write_response_tasks`,
// the request body filters, `send_body_to1`); only the hand-off between the
// two halves is gone. Each body piece is read from one side and written to
// the other in the same poll.

use super::*;
use crate::proxy_cache::{range_filter::RangeBodyFilter, ServeFromCache};
use crate::proxy_h1::send_body_to1;
use futures::task::AtomicWaker;
use std::pin::pin;
use std::task::{Context, Wake, Waker};

/// The session is one the direct relay handles.
pub(crate) fn direct_applies(session: &Session, upgrade_request: bool) -> bool {
    !upgrade_request
        && session.downstream_session.as_http1().is_some()
        && !session.cache.enabled()
        && !session.cache.bypassing()
        && !session.was_upgraded()
}

/// The first piece of the client's body if it is already read (pingora
/// holds what came with the head): `None` when there is none to wait for,
/// it is not here yet, the client expects a `100 Continue` first, or a
/// retry resends the buffered body.
fn direct_first_piece(session: &mut Session) -> Result<Option<Option<Bytes>>> {
    let expects_continue = session
        .req_header()
        .headers
        .contains_key(http::header::EXPECT);
    if expects_continue
        || session.as_ref().get_retry_buffer().is_some()
        || session.as_mut().is_body_empty()
        || session.as_mut().is_body_done()
    {
        return Ok(None);
    }
    // Cancel-safe (`proxy_1to1` races it in a `select!`): a piece not here
    // yet is read by the relay loop.
    match session
        .downstream_session
        .read_body_or_idle(false)
        .now_or_never()
    {
        Some(Ok(piece)) => Ok(Some(piece)),
        Some(Err(e)) => Err(e),
        None => Ok(None),
    }
}

/// The most response tasks written together: the first of them waits for
/// the filters of the others (microseconds each), never for the network.
const DIRECT_BATCH: usize = 16;

impl<SV, C> HttpProxy<SV, C>
where
    C: custom::Connector,
{
    /// Writes the request head and relays the request: `proxy_1to1`'s
    /// `(downstream reusable, upstream reusable, error)`.
    pub(crate) async fn proxy_1to1_direct(
        &self,
        session: &mut Session,
        client_session: &mut HttpSessionV1,
        req: Box<RequestHeader>,
        ctx: &mut SV::CTX,
    ) -> (bool, bool, Option<Box<Error>>)
    where
        SV: ProxyHttp + Send + Sync,
        SV::CTX: Send + Sync,
    {
        session.as_mut().enable_retry_buffering();
        // The first piece of the client's body, when it is already here,
        // leaves with the head in one write (pingora-core 0002): one send
        // and one segment, not two sends and two upstream wake-ups.
        let first = match direct_first_piece(session) {
            Ok(first) => first,
            Err(e) => return (false, false, Some(e.into_down())),
        };
        let head = match &first {
            Some(_) => client_session.defer_request_header(req).map(drop),
            None => client_session.write_request_header(req).await.map(drop),
        };
        if let Err(e) = head {
            return (false, false, Some(e.into_up()));
        }
        match self
            .direct_relay(session, client_session, first, ctx)
            .await
        {
            Ok((downstream_can_reuse, upstream_can_reuse)) => {
                (downstream_can_reuse, upstream_can_reuse, None)
            }
            Err(e) => (false, false, Some(e)),
        }
    }

    /// `(downstream reusable, upstream reusable)`, as `proxy_1to1`'s halves
    /// decide them. `first`: a piece of the client's body already read,
    /// whose write takes the request head with it (deferred).
    async fn direct_relay(
        &self,
        session: &mut Session,
        client_session: &mut HttpSessionV1,
        first: Option<Option<Bytes>>,
        ctx: &mut SV::CTX,
    ) -> Result<(bool, bool)>
    where
        SV: ProxyHttp + Send + Sync,
        SV::CTX: Send + Sync,
    {
        // The client's body is read whole (`downstream_done`); the upstream
        // was sent its end (`upstream_request_done`).
        let mut downstream_done = session.as_mut().is_body_done();
        let mut upstream_request_done = false;
        let mut upstream_can_reuse = true;
        let mut send_error: Option<Box<Error>> = None;

        // A retry sends the buffered body; an empty body is sent (ended) now.
        let buffer = session.as_ref().get_retry_buffer();
        let piece = match first {
            Some(piece) => Some((piece, session.is_body_done())),
            None if buffer.is_some() || session.as_mut().is_body_empty() => {
                Some((buffer, downstream_done))
            }
            None => None,
        };
        if let Some((piece, end)) = piece {
            let sent = self
                .direct_request_piece(session, client_session, piece, end, ctx)
                .await?;
            // The filters left nothing to write: the head leaves alone.
            client_session
                .write_pending_header()
                .await
                .map_err(|e| e.into_up())?;
            downstream_done = sent.0;
            Self::direct_sent(
                sent.1,
                &mut upstream_request_done,
                &mut upstream_can_reuse,
                &mut send_error,
            );
        }

        let mut serve_from_cache = ServeFromCache::new();
        let mut range_body_filter = RangeBodyFilter::new();
        // The upstream's response was read to its end; the client's was
        // written to its end.
        let mut upstream_response_done = false;
        let mut response_done = false;
        // Whether the client's idle read need be polled again (see `Idle`):
        // armed once the response is a stream.
        let mut idle = Idle::default();

        while !response_done || !downstream_done {
            tokio::select! {
                biased;

                res = client_session.read_response_task(), if !upstream_response_done => {
                    let mut res = Some(res);
                    let mut tasks = Vec::new();
                    // The error that ends the response; what came before
                    // it is written first.
                    let mut failed = None;
                    // What the upstream sent together (one read holds the
                    // head and the first event, or the last events and the
                    // end) is written together, as `proxy_1to1`'s batches
                    // are: each task is filtered as it is taken, and the
                    // next is taken only when already here (the read is
                    // cancel-safe: the `select!` above races it), so
                    // nothing waits for the network.
                    while let Some(next) = res.take() {
                        // The read that brought this task (or the last
                        // one, for a task pingora held from it).
                        session.set_upstream_rx_timestamp(
                            client_session.stream().get_rx_timestamp(),
                        );
                        let task = match next {
                            Ok(task) => task,
                            Err(e) => {
                                failed = Some(send_error.take().unwrap_or(e).into_up());
                                break;
                            }
                        };
                        upstream_response_done = task.is_end();
                        match self
                            .direct_response_task(
                                session,
                                task,
                                ctx,
                                &mut serve_from_cache,
                                &mut range_body_filter,
                            )
                            .await
                        {
                            Ok(task) => tasks.push(task),
                            Err(e) => {
                                failed = Some(e);
                                break;
                            }
                        }
                        if !upstream_response_done && tasks.len() < DIRECT_BATCH {
                            res = client_session.try_read_response_task();
                        }
                    }
                    if tasks.is_empty() {
                        if let Some(e) = failed {
                            return Err(e);
                        }
                    }
                    // One write for the batch (pingora-core 0002); then
                    // the application's work on it (pingora-proxy 0011).
                    let written = session.write_response_tasks(tasks).await;
                    self.inner.response_tasks_written(session, ctx);
                    response_done = written?;
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    if !response_done {
                        idle.arm();
                    }
                    if response_done && !upstream_response_done {
                        // The client's framing ended before the upstream's:
                        // unread bytes are left on the upstream connection.
                        upstream_can_reuse = false;
                        upstream_response_done = true;
                    }
                    // The rest of a chunked body, as it came (pingora-proxy
                    // 0009), where the application takes it.
                    if !response_done
                        && downstream_done
                        && upstream_request_done
                        && raw_body_applies(session, client_session)
                    {
                        let mut relay = RawBodyRelay {
                            session,
                            upstream: client_session,
                            idle: &idle,
                            finished: None,
                        };
                        if self.inner.relay_raw_response_body(&mut relay, ctx).await? {
                            let Some(overread) = relay.finished else {
                                return Error::e_explain(
                                    InternalError,
                                    "relay_raw_response_body returned without finish()",
                                );
                            };
                            response_done = true;
                            upstream_response_done = true;
                            upstream_can_reuse &= !overread;
                        }
                    }
                },

                body = idle.poll(downstream_done, session.downstream_session.read_body_or_idle(downstream_done)),
                    if !downstream_done || !response_done => {
                    let body = body.map_err(|e| e.into_down())?;
                    if downstream_done {
                        // Idle: nothing more is expected from the client.
                        continue;
                    }
                    let end = session.is_body_done();
                    if upstream_request_done {
                        // The upstream refused the body (`send_error`):
                        // the rest is read and dropped.
                        downstream_done = end || body.is_none();
                        continue;
                    }
                    let sent = self
                        .direct_request_piece(session, client_session, body, end, ctx)
                        .await?;
                    downstream_done = sent.0;
                    Self::direct_sent(sent.1, &mut upstream_request_done, &mut upstream_can_reuse, &mut send_error);
                },
            }
        }

        let mut reuse_downstream = true;
        if let Err(e) = session.as_mut().finish_body().await {
            error!("Error finish sending body to downstream: {}", e);
            reuse_downstream = false;
        }
        Ok((
            reuse_downstream,
            upstream_can_reuse && upstream_request_done && upstream_response_done,
        ))
    }

    /// One upstream response task through the upstream modules and
    /// `h1_response_filter`, as `proxy_1to1`'s downstream half does; a
    /// `Failed` task is its error.
    async fn direct_response_task(
        &self,
        session: &mut Session,
        #[allow(unused_mut)] mut task: HttpTask,
        ctx: &mut SV::CTX,
        serve_from_cache: &mut ServeFromCache,
        range_body_filter: &mut RangeBodyFilter,
    ) -> Result<HttpTask>
    where
        SV: ProxyHttp + Send + Sync,
        SV::CTX: Send + Sync,
    {
        #[cfg(feature = "upstream_modules")]
        if let HttpTask::Header(header, end_of_stream) = &task {
            self.inner
                .adjust_upstream_modules(session, header, *end_of_stream, ctx)
                .await?;
        }
        #[cfg(feature = "upstream_modules")]
        session.upstream_modules_filter_task(&mut task).await?;
        session.upstream_compression.response_filter(&mut task);
        let task = self
            .h1_response_filter(
                session,
                task,
                ctx,
                serve_from_cache,
                range_body_filter,
                false,
            )
            .await?;
        match task {
            HttpTask::Failed(e) => Err(e),
            task => Ok(task),
        }
    }

    /// One piece of the client's body through the request body filters
    /// (as `send_body_to_pipe`) and on to the upstream (`send_body_to1`):
    /// whether the client's body ended, and the write's outcome (`None`:
    /// nothing to write).
    async fn direct_request_piece(
        &self,
        session: &mut Session,
        client_session: &mut HttpSessionV1,
        mut data: Option<Bytes>,
        end_of_body: bool,
        ctx: &mut SV::CTX,
    ) -> Result<(bool, Option<Result<bool>>)>
    where
        SV: ProxyHttp + Send + Sync,
        SV::CTX: Send + Sync,
    {
        let end_of_body = end_of_body || data.is_none();
        session
            .downstream_modules_ctx
            .request_body_filter(&mut data, end_of_body)
            .await?;
        self.inner
            .request_body_filter(session, &mut data, end_of_body, ctx)
            .await?;
        let upstream_end_of_body = end_of_body || data.is_none();
        if !upstream_end_of_body && data.as_ref().is_some_and(|d| d.is_empty()) {
            return Ok((end_of_body, None));
        }
        let written = send_body_to1(
            client_session,
            Some(HttpTask::Body(data, upstream_end_of_body)),
        )
        .await;
        Ok((end_of_body, Some(written)))
    }

    /// Applies a request body write's outcome as `proxy_handle_upstream`
    /// does: an error ends the request side and the connection's reuse,
    /// and is kept to explain a response read failure.
    fn direct_sent(
        written: Option<Result<bool>>,
        upstream_request_done: &mut bool,
        upstream_can_reuse: &mut bool,
        send_error: &mut Option<Box<Error>>,
    ) {
        match written {
            None => {}
            Some(Ok(done)) => *upstream_request_done = done,
            Some(Err(e)) => {
                warn!("send error, draining read buf: {e}");
                *upstream_request_done = true;
                *upstream_can_reuse = false;
                *send_error = Some(e);
            }
        }
    }
}

/// Whether the rest of the response body may be offered to
/// `relay_raw_response_body` (pingora-proxy 0009): both sides chunked
/// HTTP/1, the upstream's body at a chunk boundary with nothing buffered,
/// and nothing that changes a body in between.
fn raw_body_applies(session: &mut Session, upstream: &mut HttpSessionV1) -> bool {
    #[cfg(feature = "upstream_modules")]
    if !session.upstream_modules_ctx.is_empty() {
        return false;
    }
    session.downstream_modules_ctx.is_empty()
        && !session.upstream_compression.is_enabled()
        && !session.upstream_headers_mutated_for_cache()
        && session
            .downstream_session
            .as_http1()
            .is_some_and(|h1| h1.raw_body_ready())
        && upstream.raw_body_ready()
}

/// The rest of a chunked response body, for
/// [`ProxyHttp::relay_raw_response_body`] to relay as the upstream sent
/// it: each read is the upstream's bytes as they came, each write goes to
/// the client as it is, flushed. Reads watch the client too (its idle
/// read, as the direct relay's loop does), so a client that goes away
/// ends the relay at once. Patched by tokentap (pingora-proxy 0009).
pub struct RawBodyRelay<'a> {
    session: &'a mut Session,
    upstream: &'a mut HttpSessionV1,
    idle: &'a Idle,
    /// `finish` was called: whether bytes were read past the body's end.
    finished: Option<bool>,
}

impl RawBodyRelay<'_> {
    /// The upstream's next bytes, chunk framing included, as one read of
    /// its connection brought them, under the upstream read timeout. An
    /// error when the upstream closed before the body's end, timed out or
    /// failed, or the client went away.
    pub async fn read(&mut self) -> Result<Bytes> {
        loop {
            tokio::select! {
                biased;

                read = self.upstream.read_body_raw() => {
                    let bytes = read.map_err(|e| e.into_up())?;
                    if bytes.is_empty() {
                        return Error::e_explain(
                            ConnectionClosed,
                            "upstream closed before the end of a chunked body",
                        )
                        .map_err(|e| e.into_up());
                    }
                    self.session
                        .set_upstream_rx_timestamp(self.upstream.stream().get_rx_timestamp());
                    return Ok(bytes);
                },

                idle = self.idle.poll(true, self.session.downstream_session.read_body_or_idle(true)) => {
                    // Stray bytes (or a tolerated half-close) end nothing.
                    idle.map_err(|e| e.into_down())?;
                },
            }
        }
    }

    /// When the kernel received the bytes of the last [`Self::read`]
    /// (`None` unless the peer set `rx_timestamp`), as
    /// [`Session::upstream_rx_timestamp`] says in the body filters.
    pub fn rx_timestamp(&self) -> Option<SystemTime> {
        self.session.upstream_rx_timestamp()
    }

    /// Writes `bytes` to the client as they are and flushes them, under
    /// the client write timeout; `payload`: how many of them are body
    /// payload (for the byte counts of both sessions).
    pub async fn write(&mut self, bytes: &[u8], payload: usize) -> Result<()> {
        self.upstream.count_raw_body(payload);
        let Some(h1) = self.session.downstream_session.as_http1_mut() else {
            return Error::e_explain(InternalError, "raw body relay without an HTTP/1 client");
        };
        h1.write_body_raw(bytes, payload)
            .await
            .map_err(|e| e.into_down())
    }

    /// The body ended with the bytes last written: `payload` bytes of
    /// payload since the relay began; `overread`, what the last read
    /// brought past the body's end (not written; the upstream connection
    /// is then not reused).
    pub fn finish(&mut self, payload: usize, overread: &[u8]) {
        self.upstream.finish_raw_body(payload, overread);
        if let Some(h1) = self.session.downstream_session.as_http1_mut() {
            h1.finish_raw_body();
        }
        self.finished = Some(!overread.is_empty());
    }
}

/// Whether the client's side of the relay can have news. Once the request
/// body is read, the client's side is an idle read (`read_body_or_idle`:
/// a one-byte read that only a disconnect or stray bytes complete); the
/// `select!` above drops it whenever the upstream's side is ready and
/// makes it anew on the next turn, whose first poll walks every stream
/// layer down to tokio's readiness again: once per relayed piece.
///
/// `Idle` polls the read with a waker of its own that notes being woken
/// before it wakes the task. A pending idle read left that waker where it
/// waits (tokio's readiness slot for the client socket, a stream layer's
/// own timer), and the registration outlives the dropped future: until it
/// is woken another poll would find nothing, so the new read is not
/// polled, only the task's waker noted for `IdleWake` to wake. Only the
/// idle read is left alone so, never a body read (pingora's body read
/// timeout lives in its future and dies with it).
///
/// What this rests on, for every layer the client's stream may have: a
/// pending read leaves a waker that outlives it (tokio's readiness slot,
/// a timer kept in the stream) and is pending only on state a read would
/// change. pingora's l4 stream (buffered, timestamping), rustls and
/// tokentap's `HeadDeadline` hold it; a layer that waits through a future
/// of its own (`readable()`, a `Notify`, a timeout inside the read) would
/// not, nor would turning `abort_on_close` on after a half-close. The
/// idle reads that pend without any waker (pipelined bytes stashed, a
/// half-close tolerated) pend forever either way.
#[derive(Default)]
struct Idle(Option<(Arc<IdleWake>, Waker)>);

/// The task's waker and the two flags `Idle` reads.
#[derive(Default)]
struct IdleWake {
    task: AtomicWaker,
    /// The last poll of an idle read returned pending.
    pending: AtomicBool,
    /// Woken since the last poll.
    woken: AtomicBool,
}

impl Wake for IdleWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl Idle {
    /// From now on, reads are polled with `Idle`'s waker. Not before a
    /// response turns out to be a stream: what the relay polls once or
    /// twice is not worth the allocation.
    fn arm(&mut self) {
        if self.0.is_none() {
            let wake = Arc::new(IdleWake::default());
            let waker = Waker::from(wake.clone());
            self.0 = Some((wake, waker));
        }
    }

    /// Polls `read` (an idle read when `idle`), with `Idle`'s waker once
    /// armed, and then not while an idle read is pending and not woken
    /// since.
    async fn poll<T>(&self, idle: bool, read: impl Future<Output = T>) -> T {
        let Some((wake, waker)) = &self.0 else {
            return read.await;
        };
        let mut read = pin!(read);
        poll_fn(|cx| {
            // Before the flags are read: a wake after it reaches the task.
            wake.task.register(cx.waker());
            if idle && wake.pending.load(Ordering::Relaxed) && !wake.woken.load(Ordering::Acquire) {
                return Poll::Pending;
            }
            wake.woken.store(false, Ordering::Release);
            let polled = read.as_mut().poll(&mut Context::from_waker(waker));
            wake.pending
                .store(idle && polled.is_pending(), Ordering::Relaxed);
            polled
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    /// A read that stays pending, counting its polls and keeping the waker
    /// it was last polled with, as tokio's readiness slot does.
    struct Pending<'a> {
        polls: &'a AtomicUsize,
        waker: &'a Mutex<Option<Waker>>,
    }

    impl Future for Pending<'_> {
        type Output = ();
        fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// A task waker that counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn an_idle_read_is_polled_again_only_once_woken() {
        let mut idle = Idle::default();
        idle.arm();
        let task = Arc::new(Count::default());
        let task_waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&task_waker);
        let polls = AtomicUsize::new(0);
        let slot = Mutex::new(None);
        let mut turn = |is_idle: bool| {
            let read = Pending {
                polls: &polls,
                waker: &slot,
            };
            let mut polled = pin!(idle.poll(is_idle, read));
            assert!(polled.as_mut().poll(&mut cx).is_pending());
            polls.load(Ordering::Relaxed)
        };

        // A body read is polled every turn.
        assert_eq!(turn(false), 1);
        assert_eq!(turn(false), 2);
        // The first idle read is polled; the next ones, with nothing woken,
        // are not.
        assert_eq!(turn(true), 3);
        assert_eq!(turn(true), 3);
        assert_eq!(turn(true), 3);
        // What the dropped read registered wakes the task, and the next
        // idle read is polled.
        let registered = slot.lock().unwrap().take().unwrap();
        registered.wake();
        assert_eq!(task.0.load(Ordering::Relaxed), 1);
        assert_eq!(turn(true), 4);
        assert_eq!(turn(true), 4);
        // A body read after an idle one is polled.
        assert_eq!(turn(false), 5);
    }

    #[test]
    fn an_unarmed_idle_polls_every_read() {
        let idle = Idle::default();
        let task_waker = Waker::from(Arc::new(Count::default()));
        let mut cx = Context::from_waker(&task_waker);
        let polls = AtomicUsize::new(0);
        let slot = Mutex::new(None);
        for n in 1..4 {
            let read = Pending {
                polls: &polls,
                waker: &slot,
            };
            assert!(pin!(idle.poll(true, read)).poll(&mut cx).is_pending());
            assert_eq!(polls.load(Ordering::Relaxed), n);
            // The read saw the task's own waker.
            let seen = slot.lock().unwrap().take().unwrap();
            assert!(seen.will_wake(&task_waker));
        }
    }

    #[test]
    fn a_ready_idle_read_is_not_left_out() {
        let mut idle = Idle::default();
        idle.arm();
        let task_waker = Waker::from(Arc::new(Count::default()));
        let mut cx = Context::from_waker(&task_waker);
        let mut polls = 0;
        for _ in 0..3 {
            let read = poll_fn(|_| {
                polls += 1;
                Poll::Ready(())
            });
            assert!(pin!(idle.poll(true, read)).poll(&mut cx).is_ready());
        }
        assert_eq!(polls, 3);
    }
}
