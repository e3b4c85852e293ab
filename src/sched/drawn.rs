//! What a step's draws and targets give back: [`DrawResult`], [`ScoreResult`], and the
//! [`DRAWN`] placeholder a sequence holds for a token the GPU has drawn but the CPU has
//! not read yet. Its own file so that the plan (which names sequences) and the sequence
//! (which records draws and scores) both import it and not each other.

use super::request::TopLogprob;

/// Marks a token id as not yet known to the CPU: `DRAWN | d` is the token of draw `d` of
/// the step planned before this one, which the GPU reads from that step's drawn tokens.
/// The engine plans a step while the GPU still runs the one before
/// ([`crate::sched::Scheduler::advance`]); vocabularies stay below 2^31.
pub const DRAWN: u32 = 1 << 31;

/// What the runner returns for each [`super::plan::Draw`], in order.
#[derive(Clone, Debug, PartialEq)]
pub struct DrawResult {
    pub token: u32,
    /// Under the model's own distribution (temperature 1).
    pub logprob: f32,
    /// Under the distribution the token was drawn from.
    pub sampling_logprob: f32,
    /// The draw's `top_logprobs` most likely tokens, most likely first.
    pub top: Vec<TopLogprob>,
}

/// What the runner returns for each [`super::plan::Target`], in order.
#[derive(Clone, Debug, PartialEq)]
pub struct ScoreResult {
    /// The given token's log-probability under the model (temperature 1).
    pub logprob: f32,
    /// Its 1-based rank among its position's logits: its place in the order of
    /// `top_logprobs` (logit descending, lowest id first among equal logits).
    pub rank: u32,
    /// The target's `top_logprobs` most likely tokens of the position, most likely first
    /// (as a draw's).
    pub top: Vec<TopLogprob>,
}
