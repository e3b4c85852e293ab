//! The engine thread's loop: commands in, steps run, samples routed out, metrics kept.
//!
//! Each turn takes every pending [`Command`], then runs one engine step if there is work
//! and the engine is not paused, routes what the step drew and finished to the requests'
//! channels, and blocks on the command channel when there is nothing to step.
//!
//! Invariants:
//! - an engine request is in `live` from the moment it is added until its last sample has
//!   been sent (or it is aborted); a request's events stop after its last `Finished`;
//! - commands are applied between steps only, as `Engine::abort` requires;
//! - while paused (or draining for a pause or a sleep), new requests are held, not added:
//!   they join the batch on resume, unless their client has gone by then; while asleep
//!   they are refused, or held until the wake with `--queue-while-asleep`
//!   (`engine_sleep`);
//! - events go out after the metrics are up to date, so a client that has heard of its
//!   tokens finds them counted; an abort's too, and the replies to the commands that abort
//!   (`/abort_requests`, `/pause`), so the gauges no longer count what they stopped.
//!
//! Metrics: after each step the loop adds the scheduler's new counts, sets the gauges,
//! and times each request from its arrival (given by the HTTP side) to its admission,
//! each sample's tokens and each sample's end. A time is taken when the step that did the
//! work returns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use sprout::engine::{Engine, StepOutput};
use sprout::gpu::memory::DeviceMemory;
use sprout::sched::{FinishedSample, Request, RequestId, SchedulerStats};
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::cli::serve::heap;
use crate::cli::serve::messages::{Command, Event, PauseMode, Refusal, SleepReport};
use crate::cli::serve::metrics::Metrics;
use crate::cli::serve::sleep_state::{EngineStatus, SleepState};

/// One live engine request.
struct Live {
    id: RequestId,
    client: Client,
    /// Its prompt has been admitted (its queue time observed).
    admitted: bool,
    /// Per sample, when its last token was drawn.
    last_token: Vec<Option<Instant>>,
    /// It runs with the LoRA adapter.
    lora: bool,
}

/// Where one HTTP request's events go, and when it arrived.
#[derive(Clone)]
struct Client {
    events: tmpsc::UnboundedSender<Event>,
    stream_tokens: bool,
    arrived: Instant,
}

/// An `Add` waiting for the engine to resume (or wake).
pub(super) struct Held {
    requests: Vec<Request>,
    client: Client,
    /// The adapter the requests with `lora` name.
    adapter: Option<String>,
    pub(super) reply: oneshot::Sender<Result<(), Refusal>>,
}

/// What waits for the requests in flight to finish.
pub(super) enum Drain {
    /// `/pause?mode=wait`: answered once paused.
    Pause(oneshot::Sender<()>),
    /// `/sleep?mode=wait`: sleeps at `level`, then answers.
    Sleep {
        level: u8,
        reply: oneshot::Sender<Result<SleepReport, String>>,
    },
}

/// How often the device-memory figure is taken while steps run (the allocator's report
/// lists every allocation; memory changes only on sleep, wake and updates, which take it
/// at once).
const MEMORY_EVERY: Duration = Duration::from_secs(1);

/// The loop's state; see the module docs.
pub struct EngineLoop<'e> {
    pub(super) engine: Engine<'e>,
    pub(super) metrics: Arc<Metrics>,
    live: HashMap<u32, Live>,
    /// The scheduler's counters when they were last added to the metrics.
    counted: SchedulerStats,
    pub(super) paused: bool,
    /// Pauses and sleeps answered once the requests in flight have finished.
    pub(super) draining: Vec<Drain>,
    pub(super) held: Vec<Held>,
    pub(super) sleep: SleepState,
    /// Requests that arrive while asleep wait for the wake (else: 503).
    pub(super) queue_while_asleep: bool,
    /// The device memory held, and when it was taken (`None`: take it at the next publish).
    memory: (DeviceMemory, Option<Instant>),
    /// What the HTTP side reads of this loop's state.
    status: Arc<Mutex<EngineStatus>>,
}

impl<'e> EngineLoop<'e> {
    pub fn new(
        engine: Engine<'e>,
        metrics: Arc<Metrics>,
        status: Arc<Mutex<EngineStatus>>,
        queue_while_asleep: bool,
    ) -> EngineLoop<'e> {
        let memory = engine.device_memory();
        EngineLoop {
            engine,
            metrics,
            live: HashMap::new(),
            counted: SchedulerStats::default(),
            paused: false,
            draining: Vec::new(),
            held: Vec::new(),
            sleep: SleepState::default(),
            queue_while_asleep,
            memory: (memory, None),
            status,
        }
    }

    /// Runs until a `Shutdown` command, or until the command channel closes.
    pub fn run(mut self, commands: mpsc::Receiver<Command>) {
        loop {
            // Block for the next command only when there is nothing to step.
            let first = if self.stepping() {
                match commands.try_recv() {
                    Ok(c) => Some(c),
                    Err(mpsc::TryRecvError::Empty) => None,
                    Err(mpsc::TryRecvError::Disconnected) => Some(Command::Shutdown),
                }
            } else {
                Some(commands.recv().unwrap_or(Command::Shutdown))
            };
            let pending = first
                .into_iter()
                .chain(std::iter::from_fn(|| commands.try_recv().ok()));
            for command in pending {
                if let Command::Shutdown = command {
                    return self.shut_down();
                }
                self.apply(command);
            }
            if self.stepping() {
                self.step();
            }
            self.finish_draining();
            self.publish();
        }
    }

    fn stepping(&self) -> bool {
        self.engine.has_work() && !self.paused && self.awake()
    }

    fn apply(&mut self, command: Command) {
        match command {
            Command::Add {
                requests,
                stream_tokens,
                events,
                arrived,
                adapter,
                reply,
            } => {
                let client = Client {
                    events,
                    stream_tokens,
                    arrived,
                };
                if let Some(refusal) = self.unavailable() {
                    let _ = reply.send(Err(refusal));
                } else if self.paused || !self.draining.is_empty() || self.sleep.is_sleeping() {
                    self.held.push(Held {
                        requests,
                        client,
                        adapter,
                        reply,
                    });
                } else {
                    let _ = reply.send(self.add(requests, client, adapter.as_deref()));
                }
            }
            Command::Abort { indexes } => {
                // The client is gone: its samples are counted, and go nowhere.
                self.abort(Some(&indexes), false);
            }
            Command::AbortRequests { indexes, reply } => {
                let _ = reply.send(self.abort(indexes.as_deref(), true));
            }
            Command::Pause { mode, reply } => match mode {
                PauseMode::Keep => {
                    self.paused = true;
                    let _ = reply.send(());
                }
                PauseMode::Abort => {
                    self.abort(None, true);
                    self.paused = true;
                    let _ = reply.send(());
                }
                PauseMode::Wait => self.draining.push(Drain::Pause(reply)),
            },
            Command::Resume { reply } => {
                self.paused = false;
                // A pause or sleep still waiting for its requests is called off: its
                // caller hears so when the sender drops.
                self.draining.clear();
                if !self.sleep.is_sleeping() {
                    self.start_held();
                }
                let _ = reply.send(());
            }
            Command::Sleep { level, mode, reply } => match mode {
                PauseMode::Keep => self.sleep_now(level, reply),
                PauseMode::Abort => {
                    self.abort(None, true);
                    self.sleep_now(level, reply);
                }
                PauseMode::Wait => self.draining.push(Drain::Sleep { level, reply }),
            },
            Command::WakeUp { tags, reply } => self.wake(tags, reply),
            Command::ResetPrefixCache { reply } => {
                let _ = reply.send(self.engine.reset_prefix_cache());
            }
            Command::UpdateWeights {
                weights,
                version,
                reply,
            } => {
                if self.sleep.weights {
                    let _ = reply.send(Err("the weights went to sleep while the update \
                                           loaded: wake them (POST /wake_up?tags=weights) \
                                           and update again"
                        .to_string()));
                    return;
                }
                let lora_version = self.engine.update_weights(weights, version);
                if lora_version.is_some() {
                    self.metrics.set_lora(lora_version);
                }
                self.refresh_memory();
                let _ = reply.send(Ok(lora_version));
            }
            Command::LoadLora {
                adapter,
                name,
                inplace,
                reply,
            } => {
                let _ = reply.send(self.load_lora(&adapter, name, inplace));
                // The adapter's host copy is on the device now.
                drop(adapter);
                heap::release_free_pages();
            }
            Command::UnloadLora { name, reply } => {
                let _ = reply.send(self.unload_lora(&name));
            }
            Command::Shutdown => unreachable!("handled by the loop"),
        }
    }

    /// Once every request in flight has finished, pauses or sleeps as the waiting callers
    /// asked, and answers them.
    fn finish_draining(&mut self) {
        if !self.draining.is_empty() && self.live.is_empty() && !self.engine.has_work() {
            for drained in std::mem::take(&mut self.draining) {
                match drained {
                    Drain::Pause(reply) => {
                        self.paused = true;
                        let _ = reply.send(());
                    }
                    Drain::Sleep { level, reply } => self.sleep_now(level, reply),
                }
            }
            if !self.paused && !self.sleep.is_sleeping() {
                self.start_held();
            }
        }
    }

    /// Sleeps still waiting for their requests are called off: their callers hear so
    /// when the senders drop.
    pub(super) fn call_off_sleeps(&mut self) {
        self.draining.retain(|d| matches!(d, Drain::Pause(_)));
    }

    /// Queues the requests held for a pause or a sleep.
    pub(super) fn start_held(&mut self) {
        for held in std::mem::take(&mut self.held) {
            // A client that left while held is not worth starting.
            if !held.reply.is_closed() {
                let added = self.add(held.requests, held.client, held.adapter.as_deref());
                let _ = held.reply.send(added);
            }
        }
    }

    /// Takes the device-memory figure at the next publish.
    pub(super) fn refresh_memory(&mut self) {
        self.memory.1 = None;
    }

    /// The engine requests with the LoRA adapter that are unfinished: live, or held for
    /// a pause, a drain or a wake.
    pub(super) fn lora_requests(&self) -> usize {
        let live = self.live.values().filter(|l| l.lora).count();
        let held = self.held.iter().flat_map(|h| &h.requests);
        live + held.filter(|r| r.lora).count()
    }

    /// Adds every request of one HTTP request, or none: a refusal aborts those already
    /// added. Requests with `lora` are refused unless `adapter` names the adapter in
    /// force.
    fn add(
        &mut self,
        requests: Vec<Request>,
        client: Client,
        adapter: Option<&str>,
    ) -> Result<(), Refusal> {
        if requests.iter().any(|r| r.lora) {
            self.check_adapter(adapter)?;
        }
        let mut added = Vec::new();
        for request in requests {
            let (index, n, lora) = (request.index, request.n, request.lora);
            match self.engine.add_request(request) {
                Ok(id) => added.push((index, n, lora, id)),
                Err(e) => {
                    for (_, _, _, id) in added {
                        let _ = self.engine.abort(id);
                    }
                    return Err(Refusal::Invalid(e.to_string()));
                }
            }
        }
        for (index, n, lora, id) in added {
            let live = Live {
                id,
                client: client.clone(),
                admitted: false,
                last_token: vec![None; n],
                lora,
            };
            self.live.insert(index, live);
        }
        Ok(())
    }

    /// Aborts the live requests with `indexes` (all with `None`); with `notify`, their
    /// clients get the samples so far (finish reason "abort"). Returns how many requests
    /// were aborted.
    fn abort(&mut self, indexes: Option<&[u32]>, notify: bool) -> usize {
        let chosen: Vec<u32> = match indexes {
            Some(indexes) => indexes.to_vec(),
            None => self.live.keys().copied().collect(),
        };
        let now = Instant::now();
        let mut aborted = 0;
        let mut outbox = Vec::new();
        for index in chosen {
            let Some(l) = self.live.remove(&index) else {
                continue;
            };
            aborted += 1;
            for sample in self.engine.abort(l.id).unwrap_or_default() {
                count_finish(&l, &sample, &self.metrics, now);
                if notify {
                    outbox.push((l.client.events.clone(), Event::Finished(Box::new(sample))));
                }
            }
        }
        // The gauges first, then the clients, and the caller's reply after this returns:
        // replied to before the turn's own publish, a client reading /metrics at once saw
        // the aborted request still running, took that for its next request having
        // started, and paused before that request had even been queued.
        self.publish();
        for (to, event) in outbox {
            let _ = to.send(event);
        }
        aborted
    }

    /// Aborts everything, sends each client its aborted samples, and refuses the held.
    fn shut_down(mut self) {
        self.abort(None, true);
        for held in self.held.drain(..) {
            let refusal = Refusal::Unavailable("the server is shutting down".into());
            let _ = held.reply.send(Err(refusal));
        }
        self.publish();
    }

    /// Runs one step and routes what it drew and finished.
    fn step(&mut self) {
        match pollster::block_on(self.engine.step()) {
            Ok(step) => self.route(step),
            Err(e) => {
                tracing::error!("engine step failed: {e}");
                for (_, l) in self.live.drain() {
                    let _ = self.engine.abort(l.id);
                    let failed = Event::Failed(format!("the engine failed: {e}"));
                    let _ = l.client.events.send(failed);
                }
            }
        }
    }

    /// Routes what a step drew and finished to the requests' channels.
    pub(super) fn route(&mut self, step: StepOutput) {
        let now = Instant::now();
        let (engine, metrics) = (&self.engine, &*self.metrics);
        let mut outbox = Vec::new();
        for l in self.live.values_mut() {
            note_admission(l, engine, metrics, now);
        }
        for d in step.drawn {
            let Some(l) = self.live.get_mut(&d.request_index) else {
                continue;
            };
            // A draw planned ahead for a sample that has finished since is not part of it.
            let open = engine.scheduler().generated(l.id, d.sample_index).is_some()
                || step
                    .finished
                    .iter()
                    .any(|s| s.request == l.id && s.sample_index == d.sample_index);
            if !open {
                continue;
            }
            note_token(l, d.sample_index, metrics, now);
            if l.client.stream_tokens {
                outbox.push((l.client.events.clone(), Event::Token(d)));
            }
        }
        for sample in step.finished {
            if let Some(l) = self.live.get(&sample.request_index) {
                count_finish(l, &sample, metrics, now);
                outbox.push((l.client.events.clone(), Event::Finished(Box::new(sample))));
            }
        }
        self.live
            .retain(|_, l| engine.scheduler().has_request(l.id));
        self.publish();
        for (to, event) in outbox {
            let _ = to.send(event);
        }
    }

    /// Sets the gauges and adds the scheduler's counts since the last call.
    pub(super) fn publish(&mut self) {
        let (s, m) = (self.engine.scheduler(), &*self.metrics);
        let (used, total) = (s.pool().num_used(), s.config().num_blocks);
        m.kv_blocks_in_use.set(used as i64);
        let usage = used as f64 / total.max(1) as f64;
        m.kv_cache_usage_perc.set(usage);
        m.gpu_cache_usage_perc.set(usage);
        let running = self.live.values().filter(|l| l.admitted).count();
        m.num_requests_running.set(running as i64);
        let waiting = self.live.len() - running + self.held.len();
        m.num_requests_waiting.set(waiting as i64);
        m.count(&self.counted, s.stats());
        self.counted = s.stats().clone();
        let due = self.memory.1.is_none_or(|at| at.elapsed() >= MEMORY_EVERY);
        if due {
            self.memory = (self.engine.device_memory(), Some(Instant::now()));
            m.set_device_memory(self.memory.0);
        }
        m.is_sleeping.set(self.sleep.is_sleeping() as i64);
        let status = self.status(self.memory.0);
        *self.status.lock().unwrap_or_else(|e| e.into_inner()) = status;
    }
}

/// Observes the queue time once the prompt is admitted (or has finished, admitted within
/// the step).
fn note_admission(l: &mut Live, engine: &Engine<'_>, metrics: &Metrics, now: Instant) {
    let admitted = !engine.scheduler().has_request(l.id)
        || engine.scheduler().cached_prompt_tokens(l.id).is_some();
    if admitted && !l.admitted {
        l.admitted = true;
        let queued = now - l.client.arrived;
        metrics.request_queue_time.observe(queued.as_secs_f64());
    }
}

/// Observes the time to a sample's first token, or since its token before.
fn note_token(l: &mut Live, sample_index: u32, metrics: &Metrics, now: Instant) {
    let Some(last) = l.last_token.get_mut(sample_index as usize) else {
        return;
    };
    match last.replace(now) {
        None => {
            let first = now - l.client.arrived;
            metrics.time_to_first_token.observe(first.as_secs_f64());
        }
        Some(before) => {
            let gap = now - before;
            metrics.inter_token_latency.observe(gap.as_secs_f64());
        }
    }
}

/// Counts a finished sample.
fn count_finish(l: &Live, sample: &FinishedSample, metrics: &Metrics, now: Instant) {
    metrics.finished(sample.finish_reason);
    let total = now - l.client.arrived;
    metrics.e2e_request_latency.observe(total.as_secs_f64());
}

#[cfg(test)]
#[path = "engine_loop_tests.rs"]
mod tests;
