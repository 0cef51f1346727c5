-- 0011_outside_calls_deadline: as SQLite's 0022. When the agent stops waiting for an outside
-- call's decision (gate.OutsideRequest.Deadline), set when the call is created or asked again;
-- NULL for calls stored before it.
ALTER TABLE outside_calls ADD COLUMN deadline text COLLATE "C";
