package comm

// ReduceChunk is the number of elements one round of Allreduce carries.
const ReduceChunk = reduceChunk
