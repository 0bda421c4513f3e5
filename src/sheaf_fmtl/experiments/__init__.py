"""The paper's experiments as data (:mod:`.paper`), run cell by cell (:mod:`.cells`,
:mod:`.reproduce`) into tables beside the paper's numbers (:mod:`.table`)."""
