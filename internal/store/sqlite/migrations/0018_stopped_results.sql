-- 0018_stopped_results: a stopped call's result says so in a field (issue 29).
--
-- The page used to tell a call that its run's Stop cancelled from one that failed by its text
-- ("Run stopped by <who>"); the result now carries result.stopped, set where the call is stopped
-- (agent.StoppedError). Results stored before carry only the text: mark them once here, so their
-- cards still say "cancelled" and nothing reads the text again.
UPDATE entries
SET message = json_set(message, '$.result.stopped', json('true'))
WHERE role = 'toolResult'
  AND json_extract(message, '$.result.isError') = 1
  AND json_extract(message, '$.result.content[0].text') LIKE 'Run stopped by %';
