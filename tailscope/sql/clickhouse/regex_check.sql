-- Compile a regex with RE2 the way the stage rules' CASE will (statements.stage_case: matched
-- case-insensitively); raises CANNOT_COMPILE_REGEXP on an invalid pattern. Param: pattern.
SELECT match('', concat('(?i)', {pattern:String}))
