"""tiny-mpi: the MPI collective backend of tinycore (tinycore.distributed under mpiexec), through mpi4py."""
