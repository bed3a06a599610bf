module github.com/ftrma/ftrma

go 1.26
