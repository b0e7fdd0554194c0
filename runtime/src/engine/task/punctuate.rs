//! Punctuation: the task's stream-time and wall-clock schedules, each ordered by (deadline,
//! seq), and the punctuators fired when stream time or the wall clock reaches them.

use crate::processor::PunctuationType;
use crate::processor::collector::RecordCollector;
use crate::processor::node::Scratch;
use crate::types::error::Result;

use super::StreamTask;

impl StreamTask {
    /// When the next wall-clock punctuator is due (ms), if one is scheduled.
    pub(crate) fn next_wall_clock_punctuation(&self) -> Option<i64> {
        self.wall_schedules.first().map(|s| s.next)
    }

    /// Moves schedules made since the last call into their queues.
    pub(super) fn collect_schedules(&mut self) {
        if self.signals.scheduled.is_empty() {
            return;
        }
        for schedule in self.signals.scheduled.drain(..) {
            match schedule.kind {
                PunctuationType::StreamTime => self.stream_schedules.push(schedule),
                _ => self.wall_schedules.push(schedule),
            }
        }
        self.stream_schedules.sort_by_key(|s| (s.next, s.seq));
        self.wall_schedules.sort_by_key(|s| (s.next, s.seq));
    }

    /// Fires the punctuators of `kind` due at `time`, earliest first, each once (Kafka
    /// Streams' `PunctuationQueue.mayPunctuate`); how many fired.
    fn punctuate(
        &mut self,
        kind: PunctuationType,
        time: i64,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
    ) -> Result<usize> {
        let mut fired = 0;
        loop {
            let queue = match kind {
                PunctuationType::StreamTime => &mut self.stream_schedules,
                _ => &mut self.wall_schedules,
            };
            let Some(first) = queue.first() else { break };
            if first.next > time {
                break;
            }
            let mut schedule = queue.remove(0);
            if schedule.cancelled.get() {
                continue;
            }
            let mut ctx = self.context(collector, scratch, time, None);
            (schedule.punctuator)(&mut ctx, time)?;
            fired += 1;
            if !schedule.cancelled.get() {
                schedule.reschedule(time);
                self.signals.scheduled.push(schedule);
            }
            self.collect_schedules();
        }
        Ok(fired)
    }

    /// Fires the stream-time punctuators that stream time reached; how many fired.
    pub(crate) fn punctuate_stream_time(
        &mut self,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
    ) -> Result<usize> {
        match self.stream_schedules.first() {
            Some(s) if s.next <= self.signals.stream_time => {
                let time = self.signals.stream_time;
                self.punctuate(PunctuationType::StreamTime, time, collector, scratch)
            }
            _ => Ok(0),
        }
    }

    /// Fires the wall-clock punctuators due at `now_ms`; how many fired.
    pub(crate) fn punctuate_wall_clock(
        &mut self,
        now_ms: i64,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
    ) -> Result<usize> {
        self.signals.wall_clock_ms = now_ms;
        match self.wall_schedules.first() {
            Some(s) if s.next <= now_ms => {
                self.punctuate(PunctuationType::WallClockTime, now_ms, collector, scratch)
            }
            _ => Ok(0),
        }
    }
}
