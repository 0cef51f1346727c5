-- 0022_outside_calls_deadline: when the agent stops waiting for an outside call's decision (its
-- hook's timeout minus a margin, gate.OutsideRequest.Deadline), set when the call is created or
-- asked again: the pending card counts down to it ("the agent stops waiting in 1:25") instead
-- of the gate's approval timeout. NULL for calls stored before it.
ALTER TABLE outside_calls ADD COLUMN deadline TEXT;
