"""Room for N+1 replicas on this host: cores that each replica has to itself, memory for the engines
added, and a GPU host refused by name; each refusal one line that says what is missing."""

from advisor.experiments.arms import room

TWO_CORES = room.Host(cores=2, available_bytes=20 * 2**30)
GIB = 2**30


def test_vllm_cpu_needs_a_spare_core_per_replica_and_is_refused_on_two_cores():
    """Each of two replicas on its own core, no core left over, was measured here: the queue's TTFT p50
    went from 0.1-0.3 s to 2.5-5.7 s. A vLLM CPU replica needs its worker's cores and one more."""
    cores = room.engine_cores("vllm", ["--max-num-seqs", "2"], {}, TWO_CORES)
    assert (cores.cores, cores.reserved, cores.bind_env) == (1, 1, "VLLM_CPU_OMP_THREADS_BIND")
    why = room.refusal(2, 2, cores, GIB, TWO_CORES)
    assert why.startswith("2 replicas of 2 core(s) each (vLLM's CPU worker binds all cores but one") and \
        why.endswith("need 4 cores; this host has 2"), why
    assert room.refusal(1, 1, cores, GIB, TWO_CORES) is None


def test_where_the_host_has_the_cores_each_vllm_replica_gets_its_own_range_and_a_spare_core():
    four = room.engine_cores("vllm", [], {}, room.Host(2, GIB))  # the baseline's worker: 1 core (auto, 2 cores)
    assert room.refusal(2, 2, four, GIB, room.Host(4, 8 * GIB)) is None
    assert room.binds(four, 2) == [{"VLLM_CPU_OMP_THREADS_BIND": "0"}, {"VLLM_CPU_OMP_THREADS_BIND": "2"}]
    assert room.binds(four, 1) == [{}], "one replica keeps the engine's own binding"
    assert room.binds(room.EngineCores(4, "x", True, "B", reserved=1), 2) == [{"B": "0-3"}, {"B": "5-8"}]
    big = room.Host(16, 64 * GIB)
    assert "2 replicas of 16 core(s) each" in room.refusal(2, 2, room.engine_cores("vllm", [], {}, big), GIB, big)


def test_an_explicit_binding_is_placed_again_for_each_replica_where_the_host_has_the_cores():
    big = room.Host(16, 64 * GIB)
    cores = room.engine_cores("vllm", [], {"VLLM_CPU_OMP_THREADS_BIND": "0-3"}, big)
    assert (cores.cores, cores.reserved) == (4, 1) and room.refusal(2, 2, cores, GIB, big) is None
    assert room.binds(cores, 2) == [{"VLLM_CPU_OMP_THREADS_BIND": "0-3"}, {"VLLM_CPU_OMP_THREADS_BIND": "5-8"}]
    assert "4 replicas of 5 core(s) each (VLLM_CPU_OMP_THREADS_BIND=0-3" in room.refusal(4, 4, cores, GIB, big)


def test_llama_server_threads_decide_its_cores():
    one = room.engine_cores("llamacpp", ["-m", "x.gguf", "-t", "1"], {}, TWO_CORES)
    assert one.cores == 1 and room.refusal(2, 2, one, GIB, TWO_CORES) is None
    assert room.refusal(3, 3, one, GIB, TWO_CORES) == ("3 replicas of 1 core(s) each (llama-server -t) need 3 cores; "
                                                       "this host has 2")
    two = room.engine_cores("llamacpp", ["--threads", "2"], {}, TWO_CORES)
    assert "need 4 cores; this host has 2" in room.refusal(2, 2, two, GIB, TWO_CORES)


def test_memory_refusal_names_the_need_and_what_is_available():
    one = room.engine_cores("llamacpp", ["-t", "1"], {}, room.Host(8, 10 * GIB))
    why = room.refusal(2, 3, one, 4 * GIB, room.Host(8, 10 * GIB))
    assert why == ("3 more engine(s) of about 4.0 GiB each (the running baseline's resident memory) need 12.0 GiB; "
                   "this host has 10.0 GiB available, of which the experiment takes at most 80%")
    assert room.refusal(2, 2, one, 4 * GIB, room.Host(8, 10 * GIB)) is None  # 8 GiB of the 8 allowed


def test_a_gpu_host_is_refused_until_replicas_are_placed_on_gpus():
    cores = room.engine_cores("vllm", [], {}, room.Host(64, 500 * GIB, gpus=8))
    assert "8 GPU(s) need a GPU set per replica" in room.refusal(2, 2, cores, GIB, room.Host(64, 500 * GIB, gpus=8))


def test_what_could_not_be_checked_is_said():
    cores = room.engine_cores("tgi", [], {}, TWO_CORES)
    assert cores.cores is None and room.refusal(2, 2, cores, None, TWO_CORES) is None
    assert room.unknowns(cores, None) == ["room for the replicas' cores not checked: tgi does not say how many "
                                          "cores it takes",
                                          "room for the replicas' memory not checked: no running baseline to measure"]
