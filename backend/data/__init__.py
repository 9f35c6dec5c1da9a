"""Data the algorithm is measured on, standard library only: the edit case and its corpora
(`cases`, `corpora`), the generated stdlib-probe corpus (`probe`), kernel tables (`kernel`)."""
