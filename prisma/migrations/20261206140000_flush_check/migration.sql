-- The workflow engine's last write of a step transaction goes in the COMMIT's round trip (issue 23:
-- one round trip fewer per step transaction), so what the engine checked in the statement's answer
-- (every step row, the run and every command written) is checked in the statement itself: a
-- mismatch raises, the COMMIT after it does not run, and the transaction is rolled back.
CREATE FUNCTION "metal_flush_check"(ok boolean, what text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF ok IS NOT TRUE THEN
    RAISE EXCEPTION 'workflow step write refused: %', what USING ERRCODE = 'P0001';
  END IF;
  RETURN true;
END $$;
