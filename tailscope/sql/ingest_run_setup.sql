-- A run's recorded source files and setup attributes (NULLs when the run is new). $1: run label.
SELECT SourceFiles, SetupAttributes FROM runs WHERE RunLabel = $1
