module github.com/gpuscope/gpuscope

go 1.26
