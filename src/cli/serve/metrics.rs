//! `GET /metrics`: the server's counters, gauges and histograms in the Prometheus text
//! format, under vLLM's names (`vllm:...`, every one labelled `model_name`), so that
//! routers and dashboards made for vLLM read sprout unchanged. Gauges of sprout's own give
//! the KV pool in blocks (`sprout:kv_blocks_in_use`, `sprout:kv_blocks`), the device
//! memory held (`sprout:gpu_memory_bytes`, labelled with its `source`: `allocator`, wgpu's
//! report on Vulkan and DX12, or `buffers`, sprout's own sum of its buffers elsewhere; see
//! `sprout::gpu::memory`), whether the server sleeps (`sprout:is_sleeping`), and whether
//! a LoRA adapter is loaded and its version (`sprout:lora_adapter_loaded`,
//! `sprout:lora_adapter_version`: 0 with none).
//!
//! The engine thread owns every figure here: it measures the histograms (from when the
//! HTTP side received the request) and moves the counters on after each step, so a figure
//! is never counted twice or from two places.
//!
//! Requests are counted as vLLM v1 counts them: each prompt of a completion is one request
//! for the gauges and the queue time; each of its `n` samples is one request for
//! `request_success`, time to first token, inter-token latency and end-to-end latency.

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};
use sprout::gpu::memory::DeviceMemory;
use sprout::sched::{FinishReason, SchedulerStats};

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    pub num_requests_running: IntGauge,
    pub num_requests_waiting: IntGauge,
    pub kv_cache_usage_perc: Gauge,
    /// The same figure under vLLM's older name, which some routers still read.
    pub gpu_cache_usage_perc: Gauge,
    pub kv_blocks_in_use: IntGauge,
    pub prefix_cache_queries: IntCounter,
    pub prefix_cache_hits: IntCounter,
    pub prompt_tokens: IntCounter,
    pub generation_tokens: IntCounter,
    pub num_preemptions: IntCounter,
    request_success: IntCounterVec,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub e2e_request_latency: Histogram,
    pub request_queue_time: Histogram,
    gpu_memory_bytes: IntGaugeVec,
    pub is_sleeping: IntGauge,
    lora_adapter_loaded: IntGauge,
    lora_adapter_version: IntGauge,
}

// vLLM's buckets, so that dashboards' quantiles mean the same thing.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const REQUEST_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

impl Metrics {
    /// The metrics of a server of `model_name` whose KV pool holds `kv_blocks` blocks.
    pub fn new(model_name: &str, kv_blocks: usize) -> prometheus::Result<Metrics> {
        let labels = [("model_name".to_string(), model_name.to_string())].into();
        let registry = Registry::new_custom(None, Some(labels))?;
        let reg = |c: Box<dyn prometheus::core::Collector>| registry.register(c);
        let gauge = |name: &str, help: &str| IntGauge::new(name, help);
        let counter = |name: &str, help: &str| IntCounter::new(name, help);
        let histogram = |name: &str, help: &str, buckets: &[f64]| {
            Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
        };
        let m = Metrics {
            num_requests_running: gauge(
                "vllm:num_requests_running",
                "Requests (prompts) whose KV is being computed or used.",
            )?,
            num_requests_waiting: gauge(
                "vllm:num_requests_waiting",
                "Requests (prompts) queued and not yet admitted.",
            )?,
            kv_cache_usage_perc: Gauge::new(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage: the fraction of the pool's blocks in use, 0 to 1.",
            )?,
            gpu_cache_usage_perc: Gauge::new(
                "vllm:gpu_cache_usage_perc",
                "KV-cache usage, 0 to 1 (vLLM's older name for vllm:kv_cache_usage_perc).",
            )?,
            kv_blocks_in_use: gauge("sprout:kv_blocks_in_use", "KV blocks in use.")?,
            prefix_cache_queries: counter(
                "vllm:prefix_cache_queries_total",
                "Tokens looked up in the prefix cache.",
            )?,
            prefix_cache_hits: counter(
                "vllm:prefix_cache_hits_total",
                "Tokens found in the prefix cache.",
            )?,
            prompt_tokens: counter(
                "vllm:prompt_tokens_total",
                "Prompt tokens of the requests added, each prompt once.",
            )?,
            generation_tokens: counter("vllm:generation_tokens_total", "Tokens generated.")?,
            num_preemptions: counter(
                "vllm:num_preemptions_total",
                "Sequences preempted (their KV given back, to be recomputed).",
            )?,
            request_success: IntCounterVec::new(
                Opts::new(
                    "vllm:request_success_total",
                    "Samples finished, by finish reason.",
                ),
                &["finished_reason"],
            )?,
            time_to_first_token: histogram(
                "vllm:time_to_first_token_seconds",
                "From a request's arrival to each sample's first token.",
                TTFT_BUCKETS,
            )?,
            inter_token_latency: histogram(
                "vllm:inter_token_latency_seconds",
                "Between a sample's successive tokens.",
                ITL_BUCKETS,
            )?,
            e2e_request_latency: histogram(
                "vllm:e2e_request_latency_seconds",
                "From a request's arrival to each sample's end.",
                REQUEST_BUCKETS,
            )?,
            request_queue_time: histogram(
                "vllm:request_queue_time_seconds",
                "From a request's arrival to its prompt's admission.",
                REQUEST_BUCKETS,
            )?,
            gpu_memory_bytes: IntGaugeVec::new(
                Opts::new(
                    "sprout:gpu_memory_bytes",
                    "Device memory held, by where the figure comes from (allocator: wgpu's \
                     report of the blocks reserved; buffers: sprout's sum of its buffers).",
                ),
                &["source"],
            )?,
            is_sleeping: gauge(
                "sprout:is_sleeping",
                "1 while the server sleeps (/sleep), 0 awake.",
            )?,
            lora_adapter_loaded: gauge(
                "sprout:lora_adapter_loaded",
                "1 while a LoRA adapter is loaded (a request's model names it), 0 without.",
            )?,
            lora_adapter_version: gauge(
                "sprout:lora_adapter_version",
                "The loaded LoRA adapter's version (one more at each in-place load); 0 \
                 without one.",
            )?,
            registry: registry.clone(),
        };
        let kv_blocks_total = gauge("sprout:kv_blocks", "Blocks in the KV pool.")?;
        kv_blocks_total.set(kv_blocks as i64);
        reg(Box::new(kv_blocks_total))?;
        reg(Box::new(m.num_requests_running.clone()))?;
        reg(Box::new(m.num_requests_waiting.clone()))?;
        reg(Box::new(m.kv_cache_usage_perc.clone()))?;
        reg(Box::new(m.gpu_cache_usage_perc.clone()))?;
        reg(Box::new(m.kv_blocks_in_use.clone()))?;
        reg(Box::new(m.prefix_cache_queries.clone()))?;
        reg(Box::new(m.prefix_cache_hits.clone()))?;
        reg(Box::new(m.prompt_tokens.clone()))?;
        reg(Box::new(m.generation_tokens.clone()))?;
        reg(Box::new(m.num_preemptions.clone()))?;
        reg(Box::new(m.request_success.clone()))?;
        reg(Box::new(m.time_to_first_token.clone()))?;
        reg(Box::new(m.inter_token_latency.clone()))?;
        reg(Box::new(m.e2e_request_latency.clone()))?;
        reg(Box::new(m.request_queue_time.clone()))?;
        reg(Box::new(m.gpu_memory_bytes.clone()))?;
        reg(Box::new(m.is_sleeping.clone()))?;
        reg(Box::new(m.lora_adapter_loaded.clone()))?;
        reg(Box::new(m.lora_adapter_version.clone()))?;
        // Every finish reason from the start, so that a rate over it is defined at once.
        for reason in ["stop", "length", "abort"] {
            m.request_success.with_label_values(&[reason]);
        }
        Ok(m)
    }

    /// Adds what the scheduler counted between `before` and `now`.
    pub fn count(&self, before: &SchedulerStats, now: &SchedulerStats) {
        let add =
            |c: &IntCounter, now: usize, before: usize| c.inc_by(now.saturating_sub(before) as u64);
        add(
            &self.prefix_cache_queries,
            now.prefix_cache_query_tokens,
            before.prefix_cache_query_tokens,
        );
        add(
            &self.prefix_cache_hits,
            now.prefix_cache_hit_tokens,
            before.prefix_cache_hit_tokens,
        );
        add(&self.prompt_tokens, now.prompt_tokens, before.prompt_tokens);
        add(
            &self.generation_tokens,
            now.generated_tokens,
            before.generated_tokens,
        );
        add(&self.num_preemptions, now.preemptions, before.preemptions);
    }

    /// Sets the device memory held (one source per backend, so one label value).
    pub fn set_device_memory(&self, memory: DeviceMemory) {
        self.gpu_memory_bytes.reset();
        let source = memory.source.name();
        let bytes = i64::try_from(memory.bytes).unwrap_or(i64::MAX);
        self.gpu_memory_bytes
            .with_label_values(&[source])
            .set(bytes);
    }

    /// Sets the LoRA adapter's gauges: its version, `None` with none loaded.
    pub fn set_lora(&self, version: Option<u64>) {
        self.lora_adapter_loaded.set(version.is_some() as i64);
        let version = version.map_or(0, |v| i64::try_from(v).unwrap_or(i64::MAX));
        self.lora_adapter_version.set(version);
    }

    /// Counts one finished sample.
    pub fn finished(&self, reason: FinishReason) {
        let label = match reason {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        };
        self.request_success.with_label_values(&[label]).inc();
    }

    /// Every metric, in the text format (`text/plain; version=0.0.4`).
    pub fn render(&self) -> Result<String, String> {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .map_err(|e| e.to_string())?;
        String::from_utf8(out).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_labels_and_counts_are_vllm_s() {
        let m = Metrics::new("smol", 64).unwrap();
        let stats = SchedulerStats {
            prompt_tokens: 10,
            generated_tokens: 7,
            prefix_cache_query_tokens: 10,
            prefix_cache_hit_tokens: 4,
            preemptions: 1,
            ..SchedulerStats::default()
        };
        m.count(&SchedulerStats::default(), &stats);
        m.count(&stats, &stats); // nothing new: nothing added
        m.finished(FinishReason::Length);
        m.time_to_first_token.observe(0.03);
        let memory = |source| DeviceMemory {
            bytes: 5,
            allocated: 4,
            source,
        };
        m.set_device_memory(memory(sprout::gpu::memory::MemorySource::Allocator));
        m.set_device_memory(memory(sprout::gpu::memory::MemorySource::Buffers));
        let text = m.render().unwrap();
        assert!(text.contains("sprout:lora_adapter_loaded{model_name=\"smol\"} 0"));
        m.set_lora(Some(3));
        let with_lora = m.render().unwrap();
        assert!(with_lora.contains("sprout:lora_adapter_loaded{model_name=\"smol\"} 1"));
        assert!(with_lora.contains("sprout:lora_adapter_version{model_name=\"smol\"} 3"));
        for line in [
            "vllm:prompt_tokens_total{model_name=\"smol\"} 10",
            "vllm:generation_tokens_total{model_name=\"smol\"} 7",
            "vllm:prefix_cache_queries_total{model_name=\"smol\"} 10",
            "vllm:prefix_cache_hits_total{model_name=\"smol\"} 4",
            "vllm:num_preemptions_total{model_name=\"smol\"} 1",
            "vllm:request_success_total{finished_reason=\"length\",model_name=\"smol\"} 1",
            "vllm:request_success_total{finished_reason=\"stop\",model_name=\"smol\"} 0",
            "vllm:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"0.04\"} 1",
            "vllm:time_to_first_token_seconds_count{model_name=\"smol\"} 1",
            "sprout:kv_blocks{model_name=\"smol\"} 64",
            "sprout:gpu_memory_bytes{source=\"buffers\",model_name=\"smol\"} 5",
            "sprout:is_sleeping{model_name=\"smol\"} 0",
            "# TYPE vllm:e2e_request_latency_seconds histogram",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
        assert!(
            !text.contains("source=\"allocator\""),
            "one source at a time"
        );
    }
}
