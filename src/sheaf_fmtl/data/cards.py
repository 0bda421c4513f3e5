"""What sheaf-fmtl data describe NAME says of a paper dataset whose files are not on this
machine: what it is, where it comes from, its licence, its size, and where to put it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Card:
    what: str
    source: str
    licence: str
    size: str


CARDS: dict[str, Card] = {
    "vehicle": Card(
        "Vehicle Sensor: 23 sensors, 100 acoustic and seismic features, binary vehicle type",
        "MOCHA's federated version (Smith et al. 2017) of Duarte & Hu 2004, as vehicle.mat",
        "research dataset, no licence stated; cite Duarte & Hu 2004",
        "about 43,700 rows x 100 features",
    ),
    "gleam": Card(
        "GLEAM: 38 subjects, 180 features of head-mounted sensors, binary eating / not eating",
        "Rahman et al. 2015, in MOCHA's layout as gleam.mat (no public copy of that file is known)",
        "non-commercial use, as its authors state",
        "38 subjects x 180 features",
    ),
    "har": Card(
        "Human Activity Recognition: 30 subjects, 561 features, 6 activities",
        "UCI Machine Learning Repository (Anguita et al. 2013), UCI HAR Dataset/",
        "CC BY 4.0",
        "10,299 rows; about 60 MB zipped",
    ),
    "school": Card(
        "School (ILEA exam scores): 139 schools, 28 features, regression",
        "MALSAR's sample data, school.mat",
        "shipped in MALSAR's GPL repository, no separate licence stated for the data",
        "44,759 bytes (school.mat)",
    ),
    "rmnist": Card(
        "Rotated MNIST: 40 clients in 4 rotation groups (0, 90, 180, 270 degrees), 10 digits",
        "MNIST (LeCun & Cortes), as Keras's mnist.npz or the IDX files",
        "CC BY-SA 3.0",
        "70,000 images of 28 x 28; about 11 MB (mnist.npz)",
    ),
    "hcifar10": Card(
        "Heterogeneous CIFAR-10: 30 clients with 5 random classes each, 32 x 32 colour images",
        "CIFAR-10 python version (Krizhevsky 2009), cifar-10-batches-py/",
        "no licence stated; cite Krizhevsky 2009",
        "60,000 images; about 170 MB (cifar-10-python.tar.gz)",
    ),
}
