from multiprocessing import shared_memory

from verl_ext.cpu.cleanup import shm_segments, unlink_orphaned_shm


def test_unlinks_only_new_unmapped_segments():
    before = shm_segments()
    kept = shared_memory.SharedMemory(create=True, size=4096)  # still mapped by this process
    leaked = shared_memory.SharedMemory(create=True, size=4096)
    leaked_name = leaked.name
    leaked.close()  # unmapped but not unlinked: what a killed vLLM server leaves
    try:
        removed = unlink_orphaned_shm(before)
        assert removed == [leaked_name]
        assert kept.name in shm_segments() and leaked_name not in shm_segments()
    finally:
        kept.close()
        kept.unlink()
